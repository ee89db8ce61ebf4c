"""Finding the user's handler: ``module:attr`` or an entry point, loaded once by the supervisor
(a failure exits with code 3 and one line) and again by each child.

The working directory is put first on ``sys.path`` (`common.workdir`, as gunicorn and uvicorn
do) by the supervisor before it starts the fork server, so the fork server and every
child forked from it search it too, and again by each child before it loads the handler: a
handler module in the directory ``marshal-run`` was started in imports without PYTHONPATH. A
module that cannot be found is reported with the ``sys.path`` entries that were searched.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from marshal_workers.common.errors import EXIT_HANDLER_LOAD, MarshalError

ENTRY_POINT_GROUP = "marshal_workers.handlers"


class LoadError(MarshalError):
    """The handler could not be imported or is not callable: exit code 3."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_HANDLER_LOAD)


def _searched() -> str:
    """The ``sys.path`` entries an import searched, on one line."""
    return ", ".join(entry or os.getcwd() for entry in sys.path)


def load_handler(spec: str) -> Any:
    """Import ``module:attr`` (dotted attr allowed) or look up an entry point by name: a
    function, a plugin class, or a plugin object (see `plugin`)."""
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        try:
            target: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            where = (
                f" (searched sys.path: {_searched()})"
                if exc.name and (module_name == exc.name or module_name.startswith(f"{exc.name}."))
                else ""
            )
            raise LoadError(
                f"cannot import handler module {module_name!r}: {type(exc).__name__}: {exc}{where}"
            ) from None
        except Exception as exc:
            raise LoadError(
                f"cannot import handler module {module_name!r}: {type(exc).__name__}: {exc}"
            ) from None
        for part in attr.split("."):
            try:
                target = getattr(target, part)
            except AttributeError:
                raise LoadError(
                    f"handler module {module_name!r} has no attribute {attr!r}"
                ) from None
    else:
        from importlib.metadata import entry_points  # noqa: PLC0415 (10 ms, rarely needed)

        named = entry_points(group=ENTRY_POINT_GROUP)
        found = [ep for ep in named if ep.name == spec]
        if not found:
            there = ", ".join(repr(n) for n in sorted({ep.name for ep in named})) or "none"
            raise LoadError(
                f"no handler {spec!r}: give MODULE:ATTR or the name of an entry point "
                f"in the group {ENTRY_POINT_GROUP!r} (installed: {there})"
            )
        try:
            target = found[0].load()
        except Exception as exc:
            raise LoadError(
                f"cannot load handler entry point {spec!r}: {type(exc).__name__}: {exc}"
            ) from None
    if not (callable(target) or hasattr(target, "handle") or hasattr(target, "handle_batch")):
        raise LoadError(
            f"handler {spec!r} is a {type(target).__name__}: give a function handle(record, ctx), "
            "or a class or object with handle or handle_batch"
        )
    return target
