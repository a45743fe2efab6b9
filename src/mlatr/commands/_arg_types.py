"""argparse types for numbers with a valid range: a bad value is argparse's usage error (exit 2) that names
the option and the range, never a traceback from deep inside a command."""

from __future__ import annotations

import argparse
import math


def _number(kind: type, low: float, inclusive: bool):
    relation = ">=" if inclusive else ">"
    noun = "an integer" if kind is int else "a number"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {noun} {relation} {low:g}, got {text!r}") from None
        if not math.isfinite(value) or (value < low if inclusive else value <= low):
            raise argparse.ArgumentTypeError(f"must be {noun} {relation} {low:g}, got {text}")
        return value

    parse.__name__ = f"{kind.__name__} {relation} {low:g}"  # argparse names the type in some messages
    return parse


#: An integer >= 1 (batch sizes, counts of results, workers).
positive_int = _number(int, 1, True)
#: An integer >= 0 (sizes that may be zero, numbers of cases).
non_negative_int = _number(int, 0, True)
#: A finite number > 0 (seconds, megabytes).
positive_float = _number(float, 0, False)
