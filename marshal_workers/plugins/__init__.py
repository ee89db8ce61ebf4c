"""The bundled handler plugins: ``echo``, ``ledger``, ``jsonl`` and ``sqlite`` (the entry points
of the group ``marshal_workers.handlers``).

Their source is the repository's top-level ``plugins/`` folder. The wheel installs those
modules here, inside the project's own package (a generic top-level ``plugins`` would collide
with any other project's); run from a checkout (an editable install, the tests), this package
reads them from that folder instead. Runs in the child process. The plugins import the
public handler API (`marshal_workers.handler`) and, like the child, may import `common` and
`protocol` (the ledger's file format, a key's slice), never the clients, ipc, the log or the
fold (tests/unit/project/test_package_rules.py).
"""

from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[2] / "plugins"
if not (Path(__file__).parent / "ledger.py").exists() and _CHECKOUT.is_dir():
    __path__.append(str(_CHECKOUT))
