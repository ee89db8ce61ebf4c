"""What operators ask of a member: stop (TERM, fast on INT/QUIT or a second TERM), reload
(HUP), and an admin's pause of the group (ReleaseGroup in the log, from `marshal-admin`).

`Operator` owns the member's stopping, reloading and pause state. A stop releases the member
claim first (the others count one member less, so their shares have room for the partitions
about to come free, and each is claimed as its release is folded), asks every child to finish
its batch, releases each claim once its child is gone, and exits 0 once nothing is held or
being claimed; a fast stop kills the children first. A reload replaces every child by a
fresh one while the claims stay. While another client has paused the group, the member claims
nothing and releases every data claim gracefully; it claims again once the pause is over.
"""

from __future__ import annotations

import signal

from marshal_workers.common.errors import EXIT_OK, EXIT_PLACEMENT_MOVED, EXIT_USAGE
from marshal_workers.core import commands as cmd
from marshal_workers.core import observations as obs
from marshal_workers.core.claiming import Claiming
from marshal_workers.core.heldclaim import HELD_PHASES, Phase
from marshal_workers.core.keeping import Keeping
from marshal_workers.core.memberstate import MemberState
from marshal_workers.core.pauses import pause_by_other
from marshal_workers.core.pending import Kind
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.metadata import moved_text, placement_moved, settings_problem
from marshal_workers.protocol.placement import spread
from marshal_workers.protocol.rationalizer import GroupPause


class Operator:
    """Stops, reloads and pauses of one member."""

    def __init__(self, ctx: MemberState, keeping: Keeping, claiming: Claiming) -> None:
        self.ctx = ctx
        self.keeping = keeping
        self.claiming = claiming
        self.done = False
        self.exit_code: int | None = None
        self.exit_reason = ""
        self.reload_pending = False
        self.paused_until_ms: int | None = None
        self.settings_problem: str | None = None  # the group's settings are no longer ours
        self.placement_moved = False  # ... only in where they coordinate the group: exit 6
        self.replacer: str | None = None  # the instance that took this one's place
        self.free_since: float | None = None  # dormant: since when its announcement is free

    @property
    def dormant(self) -> bool:
        """Replaced by another instance of this client id, and not stopping: claiming nothing
        while that one's claim of this client's announcement is fresh (`stay_dormant`)."""
        return self.replacer is not None and not self.ctx.stopping

    def signal(self, sig: signal.Signals, now: float) -> None:
        """TERM, INT, QUIT and HUP (SIGUSR1 is the runtime's: it is pure I/O)."""
        if sig is signal.SIGTERM and not self.ctx.stopping:
            self.request_stop(now, fast=False)
        elif sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            self.request_stop(now, fast=True)
        elif sig is signal.SIGHUP:
            self.reload(now)

    # ---- stopping ---------------------------------------------------------------------------

    def request_stop(self, now: float, fast: bool) -> None:
        """TERM: children finish their batch, then release. INT/QUIT (or a second TERM): now."""
        ctx = self.ctx
        ctx.say("info", "stopping", fast=fast, claims=len(ctx.held))
        if not ctx.stopping:
            ctx.observe(obs.Stopping())
        ctx.stopping = True
        deadline = now + (0.0 if fast else ctx.s.stop_timeout)
        for held in list(ctx.held.values()):
            if held.is_member or held.phase in (Phase.LOST, Phase.RELEASING):
                continue
            self.keeping.stop_child(held, deadline)
            if fast and held.child:
                held.revoked_lease = held.lease  # still the member's: it releases (`finish`)
                held.lease = 0.0
                ctx.out.append(cmd.SetLease(held.key, 0.0))
                held.kill_sent = held.term_sent = True
                self.keeping.signal_child(held, signal.SIGKILL, "fast stop")

    def advance_stop(self, now: float) -> None:
        """Each turn while stopping: the member claim released first, then what is done; exit
        once nothing is held or being claimed."""
        ctx = self.ctx
        member = ctx.held.get(self.claiming.member)
        if member is not None and member.phase is not Phase.RELEASING:
            self.keeping.finish(member, now, release=True)  # leaving: the others' shares grow
        for held in list(ctx.held.values()):
            if held.phase is Phase.STARTING:
                held.phase = Phase.STOPPING
                self.keeping.finish(held, now, release=True)
        if ctx.held:
            return
        ops = ctx.pending.ops.values()
        if any(op.kind in (Kind.CLAIM, Kind.TAKEOVER) for op in ops):
            return  # a claim in flight may still win: release it then
        if self.settings_problem is not None:  # restart with the group's settings
            code = EXIT_PLACEMENT_MOVED if self.placement_moved else EXIT_USAGE
            self.exit(code, self.settings_problem)
        else:
            self.exit(EXIT_OK, "stopped")

    def exit(self, code: int, reason: str) -> None:
        """The member is done."""
        if self.done:
            return
        self.done = True
        self.exit_code = code
        self.exit_reason = reason
        self.ctx.out.append(cmd.Exit(code, reason))

    def replaced(self, instance: str, now: float) -> None:
        """Another instance of this client id took over this one's member claim (a restart
        elsewhere while this one was frozen, or a second host started with the same client id):
        this one stops handling, as the protocol requires of a replaced instance, and goes
        dormant. Its data claims are the new instance's (taken over, their children killed)
        or released gracefully; it claims nothing while the new instance's claim of the
        announcement is fresh, and claims again once that has fallen silent
        (`stay_dormant`). It does not exit: the log authenticates no writer, so a forged
        takeover would stop a member for good with one record (exit 2, which systemd does not
        restart; restarted, it would take the claims back, and the two would replace each
        other for ever). Its loop stays healthy, so a watchdog does not restart it either."""
        ctx = self.ctx
        if ctx.stopping:
            return  # (stopping already, say a deploy's TERM: it stops as asked)
        if self.replacer is not None:
            if instance != self.replacer:  # the replacer stopped and another instance won it
                self.replacer = instance  # (what operators are told names the one running)
                ctx.observe(obs.Dormant(instance))
            return
        self.replacer = instance
        self.free_since = None
        ctx.say(
            "error", "member_replaced", by_instance=instance,
            reason=f"instance {instance} of client id {ctx.s.client_id} took this one's place "
            "(this client restarted elsewhere, or a second host runs with the same "
            "--client-id): dormant, claiming nothing, until that instance falls silent; give "
            "every host its own client id, and stop the duplicate",
        )  # fmt: skip
        ctx.observe(obs.Dormant(instance))
        self.stay_dormant(now)

    def stay_dormant(self, now: float) -> None:
        """Each turn while dormant: let every claim go (data claims gracefully, as under a
        pause; the announcement released if the fold still shows it this one's), then claim
        again once the announcement has been free (released, or silent past 2*HB: the replacer
        stopped, died, or was a forgery) for HB/2. The wait gives a live replacer that was only
        slow the first claim; if this one wins, a replacer that wakes later goes dormant on this
        one's grant, so one instance runs at a time."""
        ctx = self.ctx
        deadline = now + ctx.s.stop_timeout
        for held in list(ctx.held.values()):
            if held.is_member:
                if held.phase not in (Phase.LOST, Phase.RELEASING):
                    self.keeping.finish(held, now, release=True)
            elif held.phase in HELD_PHASES:
                self.keeping.stop_child(held, deadline, reason="revoke")
        self.claiming.idle_since = None  # (not starving: dormant by the log's word)
        acquiring = any(o.kind in (Kind.CLAIM, Kind.TAKEOVER) for o in ctx.pending.ops.values())
        if ctx.held or acquiring or not self.claiming.member_claimable(now):
            self.free_since = None
            return
        if self.free_since is None:
            self.free_since = now
        if now - self.free_since < ctx.s.heartbeat_interval / 2:
            return
        ctx.say(
            "info", "member_resumed", after_instance=self.replacer,
            reason="the instance that replaced this one fell silent: claiming again",
        )  # fmt: skip
        self.replacer = None
        self.free_since = None
        ctx.observe(obs.Resumed())

    def settings_recorded(self, event: ev.GroupSettingsRecorded, now: float) -> None:
        """Settings recorded for this group other than this member's (an operator's
        `marshal-admin group-settings --change`): stop gracefully, then exit 2, before anything
        else folded after them is claimed on; exit 6 if only the placement differs (`--move`:
        restarted, the member locates the new one; its member claim is dropped at once where
        the new placement puts it on another partition)."""
        ctx = self.ctx
        mine = ctx.s.shared
        if mine is None or event.settings.group_id != mine.group_id or ctx.stopping:
            return
        problem = settings_problem(event.settings, mine)
        if problem is None:
            return
        self.placement_moved = placement_moved(event.settings, mine)
        self.settings_problem = (
            moved_text(event.settings, mine) if self.placement_moved else problem
        )
        ctx.say(
            "error", "group_settings_changed", reason=self.settings_problem,
            moved=self.placement_moved,
        )  # fmt: skip
        self.request_stop(now, fast=False)
        member = ctx.held.get(self.claiming.member)
        if self.placement_moved and member is not None:
            # Where the new placement puts the member claim elsewhere, it is dropped now,
            # neither heartbeated nor released again: the new placement judges such a record
            # on the old partition one that belongs elsewhere (malformed in the group's
            # status, never acknowledged, so the stop waited out its verdict), and the new
            # layout's members do not count the claim there. Where it stays on its partition,
            # it is released as ever (dropped, it was a member the new layout counted for 2*HB).
            new = event.settings.placement or spread(
                ctx.s.coordination_partitions, event.settings.partitioner
            )
            if new.partition_of(member.key.topic, member.key.partition) != ctx.home(member.key):
                self.keeping.drop(member.key)

    # ---- reloading --------------------------------------------------------------------------

    def reload(self, now: float) -> None:
        """SIGHUP: replace every child by a fresh one (the handler imported anew), claims kept.

        Each child finishes its batch and stops; once it has exited, a new child starts for the
        same claim with the same token at the position it reported. No release and no claim
        is written, and heartbeats go on, so nobody else can take the partition meanwhile."""
        ctx = self.ctx
        if ctx.stopping:
            ctx.say("info", "reload_ignored", reason="stopping")
            return
        deadline = now + ctx.s.stop_timeout
        asked = 0
        for held in ctx.held.values():
            if held.is_member or held.phase is not Phase.RUNNING:
                continue
            if not held.child:
                held.restart_at = 0.0
                continue
            self.keeping.stop_child(held, deadline, Phase.RELOADING)
            asked += 1
        self.reload_pending = True
        ctx.observe(obs.Reloading())
        ctx.say("info", "reloading", children=asked)

    def check_reload(self) -> None:
        """Report the reload done once no claim waits for its fresh child."""
        ctx = self.ctx
        if not self.reload_pending or any(h.phase is Phase.RELOADING for h in ctx.held.values()):
            return
        self.reload_pending = False
        if ctx.stopping:
            ctx.say("info", "reload_cut_short", reason="stopping")
            return
        ctx.observe(obs.Reloaded())
        ctx.say("info", "reloaded", children=sum(1 for h in ctx.held.values() if h.child))

    # ---- pauses -----------------------------------------------------------------------------

    def pause(self, now: float) -> GroupPause | None:
        """The pause of this group by another client in force now (each coordination
        partition judged by its own log time), the longest; or None."""
        ctx = self.ctx
        return pause_by_other(
            ctx.worlds.values(),
            ctx.s.group,
            ctx.s.client_id,
            lambda p: ctx.clock.now_ms(p, now) or 0,
        )

    def react_to_pause(self, now: float) -> bool:
        """Release every data claim while paused; whether the group is paused."""
        ctx = self.ctx
        pause = self.pause(now)
        if pause is None:
            if self.paused_until_ms is not None:
                self.paused_until_ms = None
                ctx.say("info", "group_pause_over")
            return False
        if pause.until_ms != self.paused_until_ms:
            self.paused_until_ms = pause.until_ms
            ctx.say(
                "warning",
                "group_paused",
                paused_by=pause.client_id,
                until_ms=pause.until_ms,
                claims=sum(1 for h in ctx.held.values() if not h.is_member),
            )
        deadline = now + ctx.s.stop_timeout
        for held in ctx.held.values():
            if not held.is_member and held.phase in HELD_PHASES:
                self.keeping.stop_child(held, deadline, reason="revoke")
        self.claiming.idle_since = None
        return True
