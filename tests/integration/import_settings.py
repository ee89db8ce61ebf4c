"""A handler module that sets the garbage collector's thresholds at its import, and records
in each child process what they are when it handles (`test_spare_child`): what a module sets
at its import stands in every child, the spare included."""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path
from typing import Any

OWN = (1234, 5, 6)
gc.set_threshold(*OWN)

_noted = False


def handle(record: Any, ctx: Any) -> None:
    global _noted  # noqa: PLW0603 (once per process)
    if _noted:
        return
    _noted = True
    out = Path(os.environ["IMPORT_SETTINGS_DIR"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{os.getpid()}.json").write_text(json.dumps(list(gc.get_threshold())))
