"""marshal-audit's exit codes (a documented protocol) and the error that carries the failure code.

- 0: the audit ran and found no violation.
- 1: the audit ran and found at least one violation (the summary and stderr name them).
- 2: usage or configuration error (bad option, missing input, a ledger path that is missing or
  holds no ledger file).
- 3: the audit could not run to the end (Kafka unreachable, Spark or Maven failed, ...).

So a deployment can be gated on ``marshal-audit ... && deploy``; 1 means "look at the report",
2 and 3 mean "the audit itself did not happen".
"""

from __future__ import annotations

from marshal_workers.common.errors import MarshalError

EXIT_CLEAN = 0
EXIT_VIOLATIONS = 1
EXIT_USAGE = 2
EXIT_FAILED = 3


class AuditFailedError(MarshalError):
    """The audit could not run to the end: exit code 3."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_FAILED)


class AuditUsageError(MarshalError):
    """A wrong option or input: exit code 2."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)
