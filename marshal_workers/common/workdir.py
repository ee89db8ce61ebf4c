"""The working directory first on ``sys.path``, as gunicorn and uvicorn do: a handler module in
the directory ``marshal-run`` was started in imports without PYTHONPATH.

Done by the supervisor before it starts the fork server (`supervisor.launch`, `supervisor.run`),
so the server and every child forked from it search it too, and by each child before it loads
the handler (`handler.loading`). Imports the standard library only: `marshal-run` calls it
before its own imports.
"""

from __future__ import annotations

import os
import sys


def working_directory_on_path() -> str:
    """Put the working directory (absolute, so a later ``chdir`` does not move it) first on
    ``sys.path`` unless it is there already; return it."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    return here
