"""Giving the heap memory a burst of work freed back to the system (glibc's ``malloc_trim``).

A supervisor's catch-up reads the whole coordination log: librdkafka's fetch queue holds up to
hundreds of megabytes of records, and Python makes an object of each; all of it is freed once
the records are folded, but glibc keeps the freed pages in its heaps, so the process's resident
memory would go on showing the size of the log it read (a flood of other groups' records
included) instead of what it keeps. One ``malloc_trim(0)`` after the catch-up returns them.
"""

from __future__ import annotations

import ctypes


def release_freed_memory() -> bool:
    """Return the C heaps' free pages to the system; False where the C library has no
    ``malloc_trim`` (not glibc: nothing done)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own symbols: libc's among them
    except (OSError, AttributeError):
        return False
    trim(0)
    return True
