"""How long a slice child waits on a silent host reader before it takes it for dead: a
review froze a reader at HB = 2 s and its slices stood idle 11-15 s (a fixed 10 s)."""

from __future__ import annotations

import pytest

from marshal_workers.config.runconfig import RunConfig
from marshal_workers.ipc.feedwire import KEEPALIVE_S, silence_for
from marshal_workers.protocol.modes import Mode
from marshal_workers.supervisor.runtime import member_settings


@pytest.mark.parametrize(("hb", "silence"), [(0.5, 3.0), (1.0, 3.0), (2.0, 4.0), (10.0, 10.0)])
def test_a_reader_is_taken_for_dead_after_two_heartbeats_within_bounds(
    hb: float, silence: float
) -> None:
    """Two heartbeats, as a claim's lease: never under 3 s (six of its keepalives, a busy
    host's scheduling), never over the 10 s it was."""
    assert silence_for(hb) == silence
    assert silence_for(hb) >= 6 * KEEPALIVE_S


def test_the_child_spec_carries_the_groups_silence() -> None:
    config = RunConfig("h:h", Mode.ALO, ("orders",), "g", "c1", heartbeat_interval=2.0)
    assert member_settings(config, 2).child.feed_silence_s == 4.0
