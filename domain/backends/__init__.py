"""Storage backends of the domain counters: ``memory`` (one process) and ``redis`` (replicas)."""

from __future__ import annotations

import zlib

__all__ = ["bucket_of"]


def bucket_of(item: str, buckets: int) -> int:
    """``id % N`` for numeric ids (neighbours spread evenly), CRC32 for other keys."""
    if item.isdigit():
        return int(item) % buckets
    return zlib.crc32(item.encode()) % buckets
