"""Exit codes (a documented protocol, docs/operating.md) and the error type that carries one.

Every command-line entry point turns a `MarshalError` into one clear line on stderr and
its exit code; nothing else escapes as a traceback.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_HANDLER_LOAD = 3
# The coordination topic's partition count is not the one recorded at init: claims would move
# to other partitions. Not restartable (systemd's RestartPreventExitStatus): an operator must act.
EXIT_COORDINATION_CHANGED = 4
# A Marshal Go fleet writes (keyless records) to this group's coordination log: two
# implementations would claim the same partitions. Not restartable (RestartPreventExitStatus).
EXIT_GO_FLEET = 5
# The group's placement moved (`marshal-admin group-settings --move`) while the member ran: it
# stops gracefully; restarted, it locates the new placement. Restartable: not prevented.
EXIT_PLACEMENT_MOVED = 6


class MarshalError(Exception):
    """A failure to report as one line, with the exit code the process should end with."""

    def __init__(self, message: str, exit_code: int = EXIT_RUNTIME) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ConfigError(MarshalError):
    """A wrong option or setting: exit code 2."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


class PlacementMovedError(ConfigError):
    """The group's settings differ from a member's in where the group is coordinated only: it
    was moved (`marshal-admin group-settings --move`). Exit code 6: restarted, the member
    locates the new placement."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.exit_code = EXIT_PLACEMENT_MOVED
