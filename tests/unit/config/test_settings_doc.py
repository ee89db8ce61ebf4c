"""The settings reference is generated from the settings table and committed up to date."""

from __future__ import annotations

from pathlib import Path

from marshal_workers.config.settings import SETTINGS
from marshal_workers.config.settingsdoc import markdown

PAGE = Path(__file__).resolve().parents[3] / "docs" / "settings.md"


def test_committed_reference_matches_the_table() -> None:
    """docs/settings.md is what `python -m marshal_workers.config.settingsdoc` prints today."""
    assert PAGE.read_text() == markdown(), "regenerate docs/settings.md (see its first line)"


def test_every_setting_is_documented_with_flag_env_and_key() -> None:
    """Each setting's three spellings appear in the reference."""
    page = markdown()
    for s in SETTINGS:
        assert f"`{s.flag}`" in page and f"`{s.env}`" in page and f"`{s.name}`" in page
