"""`pinning.pin_evidence`: which partition count the claims in a log were coordinated for."""

from __future__ import annotations

from marshal_workers.protocol.metadata import GroupSettings
from marshal_workers.protocol.pinning import pin_evidence
from marshal_workers.protocol.rationalizer import ClaimState, RationalizerConfig, World
from marshal_workers.protocol.wire import ClaimKey, Partitioner, coordination_partition

HB = 1000


def worlds_with(claims: dict[str, list[ClaimKey]], count: int, n: int = 8) -> dict[int, World]:
    """``n`` worlds holding each group's claims on their home partitions for ``count``."""
    worlds = {p: World(RationalizerConfig(HB), p) for p in range(n)}
    for keys in claims.values():
        for key in keys:
            home = coordination_partition(key.topic, key.partition, count)
            worlds[home].claims[key] = ClaimState(certain=True)
    return worlds


def keys(group: str, topic: str = "orders", n: int = 12) -> list[ClaimKey]:
    return [ClaimKey(group, topic, p) for p in range(n)]


def test_claims_on_their_homes_for_the_brokers_count_agree() -> None:
    """A log written with 3 partitions, a forged pin of 7: every group fits 3, safe."""
    evidence = pin_evidence(
        worlds_with({"g": keys("g"), "h": keys("h")}, 3), 7, 3, Partitioner.SPEC
    )
    assert evidence.agree == ("g", "h") and evidence.safe


def test_claims_for_the_recorded_count_refuse_the_brokers() -> None:
    """A log written with 2 partitions on a topic that now has 3: re-pinning is unsafe."""
    evidence = pin_evidence(worlds_with({"g": keys("g")}, 2), 2, 3, Partitioner.SPEC)
    assert evidence.recorded_only == ("g",) and not evidence.safe


def test_claims_that_fit_neither_count_are_no_evidence() -> None:
    """A group whose claims sit anywhere (a hostile flood) is named apart and decides nothing."""
    worlds = worlds_with({"g": keys("g")}, 3)
    for i, key in enumerate(keys("flood", "ft")):
        worlds[i % 8].claims[key] = ClaimState(certain=True)
    evidence = pin_evidence(worlds, 7, 3, Partitioner.SPEC)
    assert evidence.agree == ("g",) and evidence.neither == ("flood",) and evidence.safe


def test_a_groups_recorded_partitioner_places_its_claims() -> None:
    """A marshal-go group's claims are judged by md5(topic) alone, from its settings record."""
    worlds = {p: World(RationalizerConfig(HB), p) for p in range(3)}
    for key in keys("go"):
        home = coordination_partition(key.topic, key.partition, 3, Partitioner.MARSHAL_GO)
        worlds[home].claims[key] = ClaimState(certain=True)
    settings = GroupSettings(1, "i", "c", "go", HB, Partitioner.MARSHAL_GO, None)
    worlds[0].group_settings["go"] = settings
    evidence = pin_evidence(worlds, 7, 3, Partitioner.SPEC)
    assert evidence.agree == ("go",)
    del worlds[0].group_settings["go"]
    assert pin_evidence(worlds, 7, 3, Partitioner.SPEC).agree == ()
