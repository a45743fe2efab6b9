"""argparse types for numbers with a valid range, the one place the CLI's numeric options get theirs: a bad
value is argparse's usage error (exit 2) that names the option and the range, never a traceback from deep
inside a command, nor a value quietly replaced (``--port 99999`` used to serve on another port)."""

from __future__ import annotations

import argparse
import math


def number_in(kind: type, low: float | None = None, high: float | None = None, *, low_open: bool = False):
    """An argparse type: a finite ``kind`` (int | float) in ``[low, high]`` (``(low, high]`` with ``low_open``;
    a bound of None: none on that side)."""
    noun = "an integer" if kind is int else "a number"
    if low is not None and high is not None:
        rule = f"{noun} in {'(' if low_open else '['}{low:g}, {high:g}]"
    elif low is not None:
        rule = f"{noun} {'>' if low_open else '>='} {low:g}"
    else:
        rule = noun if high is None else f"{noun} <= {high:g}"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {rule}, got {text!r}") from None
        below = low is not None and (value <= low if low_open else value < low)
        if not math.isfinite(value) or below or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {text}")
        return value

    parse.__name__ = rule  # argparse names the type in some messages
    return parse


#: An integer >= 1 (batch sizes, counts of results, workers).
positive_int = number_in(int, 1)
#: An integer >= 0 (sizes that may be zero, numbers of cases, retries).
non_negative_int = number_in(int, 0)
#: A finite number > 0 (seconds, megabytes).
positive_float = number_in(float, 0, low_open=True)
#: A finite number >= 0 (delays, reserves; 0 switches a feature off where the help says so).
non_negative_float = number_in(float, 0)
#: A fraction in [0, 1] (probabilities, shares of a split).
fraction = number_in(float, 0, 1)
#: A random seed numpy and torch both take.
random_seed = number_in(int, 0, 2**32 - 1)
#: A TCP port (0: the system picks a free one).
tcp_port = number_in(int, 0, 65535)
#: A cosine similarity, in [-1, 1].
cosine = number_in(float, -1, 1)
