"""The simulator's ordering modes: sliced fleets under every fault find nothing, and
the checks across slices (`sim.slices`) judge handling sequences as their docstring says."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.slicing import Ordering, Slicing
from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.sim.cli import main
from marshal_workers.sim.params import FAULTS, SimParams
from marshal_workers.sim.slices import SimCut, SliceChecker, record_key
from tests.sim.conftest import violations

EVERY_FAULT = tuple(FAULTS)


@pytest.mark.parametrize(
    "params",
    [
        SimParams(faults=EVERY_FAULT, fault_count=6, ordering="key", workers_per_partition=3),
        SimParams(
            members=6,
            faults=EVERY_FAULT,
            fault_count=6,
            ordering="unordered",
            workers_per_partition=4,
            partitions=4,
        ),
    ],
    ids=["key-3", "unordered-4"],
)
def test_sliced_fleets_under_every_fault_find_nothing(params: SimParams) -> None:
    """A few seeds of each ordering, every fault (the long run: `make sim`)."""
    assert violations(params, 3) == []


def test_the_cli_takes_the_ordering_and_lists_the_slice_checks() -> None:
    """`--ordering key --workers-per-partition 3`: the JSON names the cut and its checks."""
    args = ["--seeds", "1", "--ordering", "key", "--workers-per-partition", "3", "--json"]
    args += ["--members", "2", "--groups", "1", "--faults", "none", "--duration", "12"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert '"ordering": "key"' in result.output and '"key_order"' in result.output


def test_workers_per_partition_needs_a_sliced_ordering() -> None:
    """Partition ordering with 3 workers is a usage error, as for marshal-run."""
    result = CliRunner().invoke(main, ["--workers-per-partition", "3"])
    assert result.exit_code == 2 and "needs ordering key or unordered" in result.output


# ---- the checks across slices, on sequences written by hand ---------------------------------

CUT = SimCut(Slicing(Ordering.KEY, 3))
DATA = ClaimKey("g", "t", 0)


def claim_of(offset: int) -> ClaimKey:
    return CUT.owner(DATA, offset)


def check(mode: Mode, handlings: list[tuple[str, int, float]]) -> list[tuple[str, str]]:
    """The violations of ``handlings`` (child, offset, time), each by its slice's claim."""
    found: list[tuple[str, str]] = []

    def violation(name: str, detail: str, t: Any = None) -> None:
        found.append((name, detail))

    checker = SliceChecker(CUT, {"g": mode}, violation)
    for cid, offset, t in handlings:
        checker.handled(cid, claim_of(offset), offset, t)
    checker.finish()
    return found


def offsets_of(key: bytes, below: int) -> list[int]:
    return [o for o in range(below) if record_key(o) == key]


def test_an_alo_redelivery_repeats_a_suffix_in_order() -> None:
    """The next holder resumes below what was handled: repeats, in order, then new records."""
    k0 = offsets_of(b"k0", 60)
    first = [("a", o, 1.0 + i / 100) for i, o in enumerate(k0[:6])]
    again = [("b", o, 5.0 + i / 100) for i, o in enumerate(k0[3:])]
    assert check(Mode.ALO, first + again) == []


def test_a_record_first_handled_after_a_later_one_of_its_key_is_out_of_order() -> None:
    """A holder that resumed above a record never handled, which is handled later after all."""
    k0 = offsets_of(b"k0", 60)
    handled = [("a", k0[0], 1.0), ("a", k0[2], 1.1), ("b", k0[1], 5.0)]
    assert [name for name, _ in check(Mode.ALO, handled)] == ["key_order"]


def test_a_child_that_goes_back_within_a_key_is_out_of_order() -> None:
    """Within one holder a key's offsets strictly increase, repeats included."""
    k0 = offsets_of(b"k0", 60)
    handled = [("a", k0[0], 1.0), ("a", k0[1], 1.1), ("a", k0[0], 1.2)]
    assert [name for name, _ in check(Mode.ALO, handled)] == ["key_order"]


def test_two_holders_of_a_key_at_once() -> None:
    """Two children handling one key over overlapping times: two holders, out of order."""
    k0 = offsets_of(b"k0", 60)
    handled = [("a", k0[0], 1.0), ("b", k0[1], 1.1), ("a", k0[2], 1.2)]
    assert [name for name, _ in check(Mode.ALO, handled)] == ["key_order"]


def test_an_offset_handled_by_another_slices_child_and_twice_in_amo() -> None:
    """A child handling an offset its slice does not take: AMO counts the repeat across slices,
    two holders of the offset and of its key at once."""
    offset = offsets_of(b"k0", 60)[0]
    other = next(k for k in CUT.claim_keys("g", "t", 1) if k != claim_of(offset))
    found: list[str] = []
    checker = SliceChecker(CUT, {"g": Mode.AMO}, lambda name, detail, t=None: found.append(name))
    checker.handled("a", claim_of(offset), offset, 1.0)
    checker.handled("b", other, offset, 1.5)
    checker.handled("a", claim_of(offset), offset + 3 * 7 * 5, 2.0)  # a is still at work
    checker.finish()
    assert set(found) == {
        "slice_respected",
        "amo_no_double_grant",
        "offset_one_holder",
        "key_order",
    }
