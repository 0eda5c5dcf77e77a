"""Which controller member leads: the one rule every client of the controllers' admin
API follows, apart from any I/O (``controller_admin.py`` asks, this decides).

Every member answers ``GET /v1/cluster`` with its own id (``self``), the leader it
knows (``leader``), its Raft state and term, and the members' admin addresses. A member
that says it leads is believed only if no member answered with a newer term: a leader
cut off from the others keeps believing it leads until check-quorum retires it (an
election timeout later), while the others have already elected a successor in a higher
term. When nobody that answered leads, the leader the newest followers name is worth
asking too — when it was not asked yet (a client given one member's address, or a
member list that changed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LEADER_STATE = "leader"


def _int(value: Any) -> int | None:
    """An id or term from a view: an int (bools are not ids), or None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class MemberView:
    """One member's ``/v1/cluster`` answer (``view``), or why there is none
    (``error``; ``status``: the HTTP status it refused with, 0 when it did not answer).
    ``known_id`` is the member id the caller gave for ``address``."""

    address: str
    view: Mapping[str, Any] | None = None
    error: str = ""
    known_id: int | None = None
    status: int = 0

    @property
    def answered(self) -> bool:
        return self.view is not None

    @property
    def member_id(self) -> int | None:
        if self.known_id is not None:
            return self.known_id
        return _int((self.view or {}).get("self"))

    @property
    def leader_id(self) -> int | None:
        return _int((self.view or {}).get("leader"))

    @property
    def raft(self) -> Mapping[str, Any]:
        raft = (self.view or {}).get("raft")
        return raft if isinstance(raft, Mapping) else {}

    @property
    def term(self) -> int:
        return _int(self.raft.get("term")) or 0

    @property
    def state(self) -> str | None:
        state = self.raft.get("state")
        return state if isinstance(state, str) else None

    @property
    def claims_leadership(self) -> bool:
        """It says it leads: its Raft state, or (a view without one) it names itself."""
        if not self.answered:
            return False
        if self.state is not None:
            return self.state == LEADER_STATE
        return self.member_id is not None and self.leader_id == self.member_id

    def admin_address_of(self, member_id: int) -> str | None:
        """The admin address this member's configuration gives ``member_id``."""
        for member in (self.view or {}).get("members") or ():
            if isinstance(member, Mapping) and _int(member.get("id")) == member_id:
                address = member.get("adminAddress")
                return address if isinstance(address, str) and address else None
        return None

    def describe(self, newest_term: int) -> str:
        """Why this member is not the leader to use, for an error message."""
        if not self.answered:
            return f"{self.address}: {self.error}"
        state = self.state or "member"
        if self.claims_leadership:
            return (
                f"{self.address}: says it leads in term {self.term}, but term {newest_term} "
                "is newer (cut off from the others?)"
            )
        leader = "no leader known" if self.leader_id is None else f"names leader {self.leader_id}"
        return f"{self.address}: {state} in term {self.term}, {leader}"


@dataclass(frozen=True)
class Leader:
    """The member to send leader calls to: its id, the address it answered at, its
    term, and its own ``/v1/cluster`` answer (members, brokers' liveness as it sees
    them)."""

    member_id: int | None
    address: str
    term: int
    view: Mapping[str, Any]

    @classmethod
    def of(cls, member: MemberView) -> Leader:
        assert member.view is not None
        return cls(member.member_id, member.address, member.term, member.view)


@dataclass(frozen=True)
class LeaderChoice:
    """The leader, or the addresses still worth asking (named as leader by a member
    that answered, not asked yet)."""

    leader: Leader | None
    follow: tuple[str, ...] = ()


def newest_term(views: Sequence[MemberView]) -> int:
    return max((v.term for v in views if v.answered), default=0)


def choose_leader(views: Sequence[MemberView], ids: Mapping[int, str]) -> LeaderChoice:
    """The rule (see the module's docstring). ``views`` in the order asked (ties go to
    the first: the caller asks the leader it remembers first); ``ids``: member id ->
    address, when the caller knows how to reach members better than their configured
    admin addresses (the operator dials pod IPs)."""
    newest = newest_term(views)
    for member in views:
        if member.claims_leadership and member.term >= newest:
            return LeaderChoice(Leader.of(member))
    asked = {v.address for v in views}
    by_id = {v.member_id: v.address for v in views if v.member_id is not None}
    follow: list[str] = []
    for member in sorted(views, key=lambda v: -v.term):
        named = member.leader_id
        if named is None:
            continue
        address = ids.get(named) or by_id.get(named) or member.admin_address_of(named)
        if address and address not in asked and address not in follow:
            follow.append(address)
    return LeaderChoice(None, tuple(follow))


def why_no_leader(views: Sequence[MemberView]) -> str:
    """Each member asked and why it is not the leader, in one line."""
    newest = newest_term(views)
    return "; ".join(v.describe(newest) for v in views) or "no member to ask"
