"""An AMO claim won on a compacted log starts at the fold's estimate, the largest offset seen;
what lies between the position last reported handled and that estimate is reported lost.

Found by marshal-sim (seeds 309022, 416058, 503039): a holder's client restarted, the new
instance took the claim over and released it at 334, while the old instance's last
reservation (to 335), written inside its lease, landed after the takeover and was refused by
the whole log. A member that joined once the cleaner had run folded the claim as uncertain,
won it at 335 and passed over record 334, which nobody handled or reported."""

from __future__ import annotations

from marshal_workers.core import commands as cmd
from marshal_workers.core import observations as obs
from marshal_workers.core.member import Member
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.wire import (
    ClaimingMessages,
    Heartbeat,
    Message,
    ReleasingPartition,
)
from tests.unit.core.test_member_core import fresh_topic, keys, settings, start, write


def _history(mode: Mode) -> list[obs.AmoLost]:
    """The history above, compacted, then a new member of ``mode`` that wins the claim."""
    topic, log_ms = fresh_topic(partitions=1)
    old, new = ("i-old", "c9", "g", "orders", 0), ("i-new", "c9", "g", "orders", 0)

    def at(ms: int, msg: Message) -> None:
        log_ms[0] = ms
        write(topic, msg)

    other = ("i-x", "cx", "other", "orders", 0)  # another group's claim, heartbeat twice:
    at(500, Heartbeat(0, *other, 1))  # the cleaner removes the first, so a reader that
    at(600, Heartbeat(0, *other, 2))  # comes later sees a gap in front of everything after
    at(1_100, ClaimingMessages(0, *old, 334))
    at(1_200, Heartbeat(0, *new, 331))  # the takeover (its position kept: 334)
    at(1_300, ClaimingMessages(0, *old, 335))  # the replaced instance's: refused by the log
    at(1_400, Heartbeat(0, *new, 334))
    at(1_500, ReleasingPartition(0, *new, 334))
    topic.compact(700)
    log_ms[0] = 10_000
    h = start(Member(settings(partitions=1, mode=mode)), topic, log_ms, n=1)
    assert keys(1)[0] in h.member.held
    return [
        c.what for c in h.commands if isinstance(c, cmd.Observe) and isinstance(c.what, obs.AmoLost)
    ]


def test_an_amo_start_above_the_position_last_reported_handled_reports_the_range() -> None:
    """AMO: the member starts at 335 and reports 334..335 lost, cause estimated."""
    lost = _history(Mode.AMO)
    assert [(x.start, x.end, x.cause) for x in lost] == [(334, 335, obs.LossCause.ESTIMATED)]


def test_alo_reports_no_loss() -> None:
    """ALO resumes at the largest position reported handled: nothing to report."""
    assert _history(Mode.ALO) == []
