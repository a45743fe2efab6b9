"""What one request to ``mlatr serve`` may ask for."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """What one request may ask for."""

    max_k: int = 100
    max_query_chars: int = 1000
    max_upload_bytes: int = 20 * 2**20
