"""The admin_client_ids setting: its default, '*', and checks, for marshal-run and marshal-admin."""

from __future__ import annotations

import pytest

from marshal_workers.admin.connection import ADMIN_CLIENT_ID
from marshal_workers.admin.options import admin_ids
from marshal_workers.common.errors import ConfigError
from marshal_workers.config.runconfig import DEFAULT_ADMIN_CLIENT_IDS, RunConfig
from marshal_workers.config.runconfig import admin_ids as config_admin_ids
from marshal_workers.config.settings import BY_NAME, resolve


class TestAdminIds:
    def test_default_is_the_admin_commands_client_id(self) -> None:
        """Out of the box only marshal-admin (the admin commands' default id) may pause."""
        assert BY_NAME["admin_client_ids"].default == DEFAULT_ADMIN_CLIENT_IDS == (ADMIN_CLIENT_ID,)
        assert RunConfig("h:h", "alo", ("t",), "g", "c").admin_client_ids == {ADMIN_CLIENT_ID}  # type: ignore[arg-type]
        assert admin_ids(DEFAULT_ADMIN_CLIENT_IDS) == {ADMIN_CLIENT_ID}

    def test_star_means_anyone_and_empty_means_nobody(self) -> None:
        """'*' lifts the restriction (the rationalizer's None); an empty list refuses all."""
        assert config_admin_ids(["ops", "*"]) is None
        assert config_admin_ids([]) == frozenset()

    def test_environment_and_flags_take_comma_separated_lists(self) -> None:
        """MARSHAL_ADMIN_CLIENT_IDS=a,b; the admin commands also split on commas."""
        resolved = resolve({}, None, {"MARSHAL_ADMIN_CLIENT_IDS": "ops-1,ops-2"})
        assert resolved.values["admin_client_ids"] == ("ops-1", "ops-2")
        assert admin_ids(("ops-1,ops-2", "ops-3")) == {"ops-1", "ops-2", "ops-3"}

    def test_ids_that_the_wire_cannot_carry_are_refused(self) -> None:
        """An id with '/' is a configuration error (exit 2) from either side."""
        with pytest.raises(ConfigError, match="admin_client_ids"):
            resolve({"admin_client_ids": ("a/b",)}, None, {})
        with pytest.raises(ConfigError, match="--admin-client-id"):
            admin_ids(("a/b",))
