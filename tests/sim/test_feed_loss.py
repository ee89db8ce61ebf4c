"""The `feed-loss` fault: the records of one data partition stop coming on one member's host
(sliced: the host's reader failed; a whole partition: the child's consumer), so every child of
that partition there ends with the Kafka exit code, and the member restarts each claim's child."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pytest

from marshal_workers.ipc.exits import EXIT_KAFKA
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.sim.params import SimParams
from marshal_workers.sim.scenario import Fleet, use_shared_decode
from marshal_workers.sim.slices import SimCut

STRIPES = SimParams(faults=("feed-loss",), fault_count=3, ordering="unordered",
                    workers_per_partition=4)  # fmt: skip
WHOLE = SimParams(faults=("feed-loss",), fault_count=3)


def _run(params: SimParams, seed: int) -> tuple[Fleet, dict[float, list[tuple[str, ClaimKey]]]]:
    """Run ``seed``; the children a lost feed reached, by the time it did (each with its
    member's name): each ends with the Kafka exit code, an AMO one once it has handed on what
    it asked for (unless something else ended it first)."""
    use_shared_decode()
    fleet = Fleet(replace(params, seed=seed))
    result = fleet.run()
    assert result.violations == []
    ended: dict[float, list[tuple[str, ClaimKey]]] = defaultdict(list)
    for node in fleet.nodes:
        for child in node.dead_children + list(node.children.values()):
            if child.feed_lost_at is not None:
                ended[child.feed_lost_at].append((node.name, child.key))
                if child.exit_code == EXIT_KAFKA:
                    assert child.exited_at >= child.feed_lost_at
    return fleet, ended


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_lost_feed_ends_the_children_of_one_data_partition_on_one_member(seed: int) -> None:
    """Each feed loss ends children of one member and one data partition, several slices of
    it at once in some run, every fault finding one; the run is clean."""
    _, ended = _run(STRIPES, seed)
    assert len(ended) == STRIPES.fault_count
    for children in ended.values():
        assert len({name for name, _ in children}) == 1
        assert len({SimCut.data_key(key) for _, key in children}) == 1
        assert len({key for _, key in children}) == len(children)


def test_a_lost_feed_ends_several_slices_at_once() -> None:
    """Sliced, a member holds several slices of a partition: one loss ends them all."""
    most = max(len(children) for seed in range(3) for children in _run(STRIPES, seed)[1].values())
    assert most >= 2


def test_unsliced_a_lost_feed_ends_one_partitions_child() -> None:
    """A whole partition has one child on a member: one child ends per loss (its consumer's
    fatal error), restarted by the member as after any crash."""
    fleet, ended = _run(WHOLE, 0)
    assert len(ended) == WHOLE.fault_count
    assert all(len(children) == 1 for children in ended.values())
    for at, children in ended.items():
        ((name, key),) = children
        node = next(n for n in fleet.nodes if n.name == name)
        again = [c for c in node.dead_children + list(node.children.values())
                 if c.key == key and c.ready_at > at]  # fmt: skip
        assert again, f"{key.topic}/{key.partition} was not started again on {name}"


def test_an_alo_child_hands_over_what_it_handled() -> None:
    """An ALO child whose feed is lost has published the end of what it handled: the
    position its member takes (`ChildExited.position`)."""
    fleet, ended = _run(STRIPES, 1)
    alo = [
        child
        for node in fleet.nodes
        for child in node.dead_children
        if child.exit_code == EXIT_KAFKA and child.spec.mode is Mode.ALO
    ]
    assert alo and ended
    assert all(child.published in (None, child.position) for child in alo)


@pytest.mark.parametrize("seed", [0, 1])
def test_feed_losses_now_and_then_never_release_a_slice(seed: int) -> None:
    """A review killed a host's reader five times, seconds apart: each loss counted as a
    failure of every slice child of the partition, and a slice with no records never cleared
    the count, so it was released for a minute. Here one partition in four slices on two
    members loses its feed a dozen times over two minutes: a child that ran two heartbeats
    before its loss is restarted without a count, and no slice is released for failures."""
    params = SimParams(
        members=2, groups=1, partitions=1, duration=120.0, faults=("feed-loss",),
        fault_count=12, ordering="unordered", workers_per_partition=4, rate=2.0,
    )  # fmt: skip
    fleet, ended = _run(params, seed)
    assert len(ended) >= 8  # the losses found children
    released = [line for node in fleet.nodes for line in node.trace
                if "claim_releasing" in line and "exit 9" in line]  # fmt: skip
    assert released == []
