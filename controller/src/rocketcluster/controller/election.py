"""Who becomes master (pure): RocketMQ 5's DefaultElectPolicy.

Candidates are the alive members of the SyncStateSet (the first election of a group
that never had a master: any alive replica); only when there are none and unclean
election is enabled, any alive replica. Among candidates the highest epoch
wins, then the largest max offset, then the best (lowest) election priority, then the
lowest id. An alive master stays master unless an admin designates another broker.

With sync replication acknowledged by ``write_quorum`` of the set's members (not all
of them), an in-sync replica may lack the latest acknowledged writes; only a large
enough group of alive members — ``|set| - quorum + 1`` — is sure to include one that
has them all, and the newest of them then wins. With fewer alive, electing would
drop acknowledged writes: that is an unclean election (found by the chaos suite: a
lagging in-sync slave, left alone by a double failure, was elected and the writes
the other two had acknowledged were cut).

An admin's switchover is fenced like a failover: the master is deposed first, and the
designated broker must then hold as much as every other fenced in-sync slave
(``designated_lacks``), or acknowledged writes that only those slaves hold would be cut.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocketcluster.controller.state import BrokerGroup, ControllerCode


@dataclass(frozen=True)
class BrokerLiveInfo:
    """What a broker's last heartbeat said about it."""

    broker_id: int
    epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    priority: int = 0
    # The master epoch of the newest view the broker has acted on (see ``fenced``).
    seen_master_epoch: int = 0


@dataclass(frozen=True)
class ElectionDecision:
    code: ControllerCode
    new_master: int | None
    unclean: bool = False
    reason: str = ""

    @property
    def elect(self) -> bool:
        """Whether an ElectMaster command should be proposed."""
        return self.code in (ControllerCode.SUCCESS, ControllerCode.CONTROLLER_MASTER_NOT_AVAILABLE)


def _rank(info: BrokerLiveInfo) -> tuple[int, int, int, int]:
    return (-info.epoch, -info.max_offset, info.priority, info.broker_id)


def decide(
    group: BrokerGroup,
    alive: dict[int, BrokerLiveInfo],
    *,
    designated: int | None = None,
    unclean_enabled: bool = False,
    write_quorum: int | None = None,
) -> ElectionDecision:
    """``alive``: the live info of every broker of ``group`` the leader sees alive;
    ``write_quorum``: how many in-sync replicas acknowledge a write (None: all of
    them, or async replication — any alive in-sync replica will do)."""
    if designated is not None:
        if designated not in group.replicas:
            return ElectionDecision(
                ControllerCode.CONTROLLER_ELECT_MASTER_FAILED,
                None,
                reason=f"broker {designated} is not registered",
            )
        if designated not in alive:
            return ElectionDecision(
                ControllerCode.CONTROLLER_BROKER_NOT_ALIVE,
                None,
                reason=f"broker {designated} is not alive",
            )
        if designated not in group.sync_state_set and not unclean_enabled:
            return ElectionDecision(
                ControllerCode.CONTROLLER_ELECT_MASTER_FAILED,
                None,
                reason=f"broker {designated} is not in the sync state set "
                f"{sorted(group.sync_state_set)}",
            )
        if designated == group.master_id:
            return ElectionDecision(
                ControllerCode.CONTROLLER_MASTER_STILL_EXIST,
                designated,
                reason="already the master",
            )
        unclean = designated not in group.sync_state_set
        return ElectionDecision(
            ControllerCode.SUCCESS, designated, unclean, "designated by an admin"
        )
    if group.master_id is not None and group.master_id in alive:
        return ElectionDecision(
            ControllerCode.CONTROLLER_MASTER_STILL_EXIST,
            group.master_id,
            reason="the master is alive",
        )
    first_time = group.master_epoch == 0 and not group.sync_state_set
    if first_time:
        # The group never had a master (RocketMQ's isFirstTimeForElect): every alive
        # replica is a candidate, and nobody's data can be lost.
        candidates = [info for b, info in alive.items() if b in group.replicas]
    else:
        candidates = [alive[b] for b in group.sync_state_set if b in alive]
    unclean = False
    short = _short_of_quorum(group, len(candidates), write_quorum) if not first_time else ""
    if candidates and short:
        if not unclean_enabled:
            return ElectionDecision(
                ControllerCode.CONTROLLER_MASTER_NOT_AVAILABLE, None, reason=short
            )
        unclean = True  # knowingly: the newest of them may still miss acknowledged writes
    if not candidates and unclean_enabled:
        candidates = [info for b, info in alive.items() if b in group.replicas]
        unclean = bool(candidates)
    if not candidates:
        return ElectionDecision(
            ControllerCode.CONTROLLER_MASTER_NOT_AVAILABLE,
            None,
            reason="no alive member of the sync state set"
            + ("" if unclean_enabled else " (unclean election is off)"),
        )
    winner = min(candidates, key=_rank)
    if short and unclean:
        why = f"unclean: {short}"
    elif unclean:
        why = "unclean: no in-sync replica alive"
    else:
        why = "alive in-sync replica with the newest data"
    return ElectionDecision(ControllerCode.SUCCESS, winner.broker_id, unclean, why)


def designated_lacks(
    group: BrokerGroup, ready: dict[int, BrokerLiveInfo], designated: int, deposed: int | None
) -> str:
    """Why electing ``designated`` after the fencing could cut acknowledged writes ("" if
    it could not). ``ready``: the fenced alive brokers (their offsets are final);
    ``deposed``: the master just deposed. An acknowledged write is on the master and
    on as many slaves as the write quorum asks, so a slave holding at least what every
    other fenced in-sync slave holds has them all. The deposed master's own tail is
    not compared: what no slave has was never acknowledged in sync mode (in async
    mode a master acknowledges alone, and a switchover cuts that tail as a failover
    would)."""
    me = ready.get(designated)
    if me is None:
        return f"broker {designated} did not report its final offset after the fencing"
    others = [
        info
        for b, info in ready.items()
        if b not in (designated, deposed) and b in group.sync_state_set
    ]
    newest = min(others, key=_rank, default=None)
    if newest is None or (newest.epoch, newest.max_offset) <= (me.epoch, me.max_offset):
        return ""
    return (
        f"broker {designated} holds up to offset {me.max_offset} (epoch {me.epoch}), "
        f"in-sync broker {newest.broker_id} up to {newest.max_offset} "
        f"(epoch {newest.epoch}): writes acknowledged with {newest.broker_id} would be cut"
    )


def _short_of_quorum(group: BrokerGroup, alive_members: int, write_quorum: int | None) -> str:
    """Why the alive in-sync replicas may all lack an acknowledged write ("" if not)."""
    if write_quorum is None:
        return ""
    members = len(group.sync_state_set)
    needed = members - min(write_quorum, members) + 1
    if alive_members >= needed:
        return ""
    return (
        f"only {alive_members} of the {members} in-sync replicas alive, writes are "
        f"acknowledged by {min(write_quorum, members)}: {needed} must be alive to be sure "
        "one holds every acknowledged write"
    )


def fenced(alive: dict[int, BrokerLiveInfo], master_epoch: int) -> dict[int, BrokerLiveInfo]:
    """The alive brokers whose last heartbeat came after they acted on the view of
    ``master_epoch`` (the deposed master's): they no longer replicate from it, so
    no write it acknowledges from now on can be on them, and their max offset is
    final. Only they may be compared and elected. Without this, a master cut off
    from the controllers (clients and slaves still reach it) went on acknowledging
    writes with one slave while another, elected on the offsets of a moment
    earlier, took over — and the first slave cut those writes (found by the soak).
    """
    return {b: info for b, info in alive.items() if info.seen_master_epoch >= master_epoch}
