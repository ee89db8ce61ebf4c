"""A claim lost to its own lease running out: where it starts again, its release (pure).

A coordination stall longer than the lease (a broker failure the heartbeat interval was not chosen
for, see docs/operating.md) ends every lease: children are fenced, and the releases after expiry are
not acknowledged, so the log keeps the position of the last heartbeat it accepted, older than what
the children had done. If this member then wins the claim back while nobody else held it in between
(the grant's previous holder is this client: no other grant, and no release, since), the records up
to the position its own child reported were handled by this member alone, under its own claim: it
resumes there (the larger of that and the log's), and its first heartbeat tells the log. Otherwise
the log's position stands: another owner may have moved it (a rewind included).

Until then the member writes its release again (`retry_release`) while a certain fold shows
this very instance as the holder, at most `RELEASE_RETRIES` times: a holder's release needs no
freshness, its child is dead, and the position is what that child handled, so whoever claims
next resumes there. An uncertain fold proves no holder, and a release written again without end
keeps the claim looking active to every reader, so nobody ever takes it over (issue 18.2).
"""

from __future__ import annotations

from marshal_workers.protocol.rationalizer import ClaimState


def reclaimed_position(
    log_position: int, own_position: int | None, previous_client: str | None, client_id: str
) -> int:
    """The start position of a claim won back (see the module docstring)."""
    if own_position is None or previous_client != client_id:
        return log_position
    return max(log_position, own_position)


RELEASE_RETRIES = 3  # writes of an unconfirmed release after the first, at most


def retry_release(
    state: ClaimState | None, client_id: str, instance_id: str, tries: int = 0
) -> bool | None:
    """Whether to write the unconfirmed release again (True), or forget the position (None):
    the fold is uncertain, or shows the claim released or held by anyone but this instance, or
    the release was written again ``tries`` = `RELEASE_RETRIES` times already."""
    if state is None or not state.certain or tries >= RELEASE_RETRIES:
        return None
    if state.holder_client != client_id or state.holder_instance != instance_id:
        return None
    return True
