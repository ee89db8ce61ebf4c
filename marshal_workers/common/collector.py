"""The cyclic collector paused while a command imports its modules (`paused`).

Imports make tens of thousands of objects the collector tracks (modules, classes, functions,
dataclasses' generated methods) and next to no garbage, and at CPython's thresholds (a pass
every 700 allocations) the collector walked them about 70 times while `marshal-run` imported
its modules: 8-10 ms of the 0.13 s those imports take on the launch's path to the first record
(docs/benchmarks.md, "Launch: the first records at the child's own priority (2026-11-30)"). It
waits for the imports' end instead, and its next pass finds what they left, if anything.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """No automatic collection inside; after it, the collector as it was before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
