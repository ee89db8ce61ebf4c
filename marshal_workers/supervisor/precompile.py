"""``python -m marshal_workers.supervisor.precompile``: the dataclasses' methods of `marshal-run`'s
imports and of the fork server's preload compiled ahead into their cache (`common.classcode`).

The installs run it after compiling the package's bytecode (``make install``): with
``PYTHONDONTWRITEBYTECODE`` set, as in this project's tests, no process would ever write the
cache, and without it the first `marshal-run` would. It imports what the two import (not the
fork server's last module, `childlink.preloaded`, which stops the fork server's cache) with the
cache on, and writes it even under ``PYTHONDONTWRITEBYTECODE`` (writing it is the command's
point), but no other bytecode there.
"""

from __future__ import annotations

import importlib

from marshal_workers.childlink.forkserver import PRELOAD
from marshal_workers.common.classcode import compiled_once

IMPORTS = (
    "marshal_workers.common.consolescripts",  # `supervisor.cli.main`'s imports
    "marshal_workers.supervisor.command",
    *(name for name in PRELOAD if name != "marshal_workers.childlink.preloaded"),
)


def main() -> None:
    """Import `IMPORTS` with the cache on; it is written as the imports end."""
    with compiled_once(write=True):
        for module in IMPORTS:
            importlib.import_module(module)


if __name__ == "__main__":
    main()
