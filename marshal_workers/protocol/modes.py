"""The delivery modes of a consumer group."""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    """Delivery mode of a consumer group."""

    AMO = "amo"
    ALO = "alo"
