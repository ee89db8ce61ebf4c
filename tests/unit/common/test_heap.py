"""`heap.release_freed_memory`: the pages a burst freed go back to the system (glibc)."""

from __future__ import annotations

import psutil
import pytest

from marshal_workers.common.heap import release_freed_memory


def test_freed_small_objects_no_longer_count_in_the_resident_memory() -> None:
    """200 MB of 1 KB objects, all freed but every 200th (so the heap stays fragmented and
    glibc keeps its pages): after the call, most of it is no longer resident."""
    process = psutil.Process()
    held = [bytes(1000) + bytes([i % 256]) for i in range(200_000)]
    kept = held[::200]
    del held
    before = process.memory_info().rss
    if not release_freed_memory():
        pytest.skip("no malloc_trim in this C library")
    after = process.memory_info().rss
    assert before - after > 100_000_000, (before, after)
    assert len(kept) == 1000
