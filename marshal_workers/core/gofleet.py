"""Refusing to run beside a Marshal Go fleet (pure detection; the supervisor acts on it).

A mixed fleet is unsafe (docs/migrating.md): Go writes its coordination records without a
Kafka key and decides on the senders' clocks, so our fold counts its records malformed and
both implementations claim the same partitions. A compacted coordination topic refuses Go's
keyless records outright; on any other topic they arrive, and the rationalizer marks each one:
a `Malformed` event whose ``keyless_group`` names the group a valid, keyless Marshal message is
about. `go_writer` finds such a record for a member's own group; `GoFleetGuard` is the hook the
supervisor's log reader calls on every malformed record, raising `GoFleetError` (exit code
`EXIT_GO_FLEET`, in the unit's RestartPreventExitStatus) with one line.
"""

from __future__ import annotations

from collections.abc import Iterable

from marshal_workers.common.errors import EXIT_GO_FLEET, MarshalError
from marshal_workers.protocol import events as ev


class GoFleetError(MarshalError):
    """A Marshal Go fleet is writing to this group: refuse to run (not restartable)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_GO_FLEET)


def go_writer(events: Iterable[ev.Event], group: str) -> ev.Malformed | None:
    """The first event saying a keyless Marshal record names ``group``, if any."""
    for event in events:
        if type(event) is ev.Malformed and event.keyless_group == group:
            return event
    return None


def refusal(event: ev.Malformed, topic: str) -> GoFleetError:
    """The one-line error for a keyless record of our group at ``event``'s position."""
    return GoFleetError(
        f"a Marshal Go fleet is writing to group {event.keyless_group!r}: keyless record at "
        f"{topic}[{event.coord_partition}] offset {event.coord_offset}; a mixed fleet would "
        "claim the same partitions twice. Stop the Go fleet and migrate "
        "(docs/migrating.md)"
    )


class GoFleetGuard:
    """The reader's malformed-record hook for one member: raises `GoFleetError` on a keyless
    record of its own group (records of other groups are left to their members)."""

    def __init__(self, group: str, topic: str) -> None:
        self.group = group
        self.topic = topic

    def __call__(self, event: ev.Malformed) -> None:
        if go_writer((event,), self.group) is not None:
            raise refusal(event, self.topic)
