"""The default client id tells hosts apart by their fully qualified name."""

from __future__ import annotations

from pathlib import Path

from marshal_workers.config.runconfig import default_client_id, host_identity


def test_hosts_with_one_short_name_get_different_ids(tmp_path: Path) -> None:
    """w1.dc1 and w1.dc2 never share a default id (the short name would be w1 for both)."""
    none = tmp_path / "missing"
    a = default_client_id("0", host_identity(lambda: "w1.dc1.example.com", none))
    b = default_client_id("0", host_identity(lambda: "w1.dc2.example.com", none))
    assert a == "w1.dc1.example.com-0" and b == "w1.dc2.example.com-0"


def test_unqualified_host_uses_the_machine_id(tmp_path: Path) -> None:
    """A host without a qualified name adds its machine id to its short name."""
    machine = tmp_path / "machine-id"
    machine.write_text("0123456789abcdef0123456789abcdef\n")
    assert host_identity(lambda: "w1", machine) == "w1-0123456789ab"
    assert host_identity(lambda: "localhost.localdomain", machine) == "localhost-0123456789ab"


def test_without_either_the_short_name_is_used(tmp_path: Path) -> None:
    """No qualified name and no machine id: the host name as it is."""
    assert host_identity(lambda: "w1", tmp_path / "missing") == "w1"


def test_default_id_on_this_host_is_a_valid_client_id() -> None:
    """The real host's default id passes the wire-format check."""
    assert default_client_id("3").endswith("-3")
