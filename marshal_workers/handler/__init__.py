"""The public handler API: what a handler plugin imports (runs in the child process).

A handler is ``handle(record, ctx)``, or a class with ``setup``, ``handle`` or ``handle_batch``
and ``teardown``; ``record`` is a `Record`, ``ctx`` a `Context`. Raise `StopProcessing` to stop
without retries or policy.

Runs in the child process. Imports only `protocol.modes` (the delivery modes) and `common`.
"""

from marshal_workers.handler.context import Context, HandleFunction
from marshal_workers.handler.errors import HandlerEnded, StopProcessing
from marshal_workers.handler.record import Record

__all__ = ["Context", "HandleFunction", "HandlerEnded", "Record", "StopProcessing"]
