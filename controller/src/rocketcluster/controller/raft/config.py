"""Static configuration of one Raft member."""

from __future__ import annotations

from dataclasses import dataclass

from rocketcluster.controller.raft.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Config:
    """How one member behaves. Timeouts are in ticks: the driver decides what a tick is.

    Membership is fixed: `voters` lists every member (3 or 5 in production), the same on
    every node, for the life of the cluster.
    """

    id: int
    voters: tuple[int, ...]
    # A follower that hears no leader for a randomized [election_tick, 2*election_tick)
    # ticks starts a (pre-)election; a leader that hears no majority for election_tick
    # ticks steps down (check_quorum).
    election_tick: int = 10
    heartbeat_tick: int = 1
    # Poll before bumping the term, so a node rejoining from a partition cannot force a
    # stable leader to step down (Raft thesis §9.6).
    pre_vote: bool = True
    # Leader steps down when it has not heard a majority for a whole election timeout
    # (checked every election_tick ticks, so it steps down within two); followers ignore
    # votes while they hear a leader (the lease that pre-vote relies on).
    check_quorum: bool = True
    # Data bytes per append message (at least one entry is always sent).
    max_size_per_msg: int | None = 1 << 20
    # Appends in flight to one follower in REPLICATE state before the leader waits.
    max_inflight_msgs: int = 256
    # Proposals are refused (UncommittedBacklogFullError) while the leader holds this many
    # entries that have not committed yet: back-pressure instead of an unbounded tail.
    max_uncommitted_entries: int | None = 4096
    # Data bytes of committed entries per Ready (None: all of them).
    max_committed_size_per_ready: int | None = None
    # The application's applied index at start: the index of the snapshot it loaded (the
    # log is often compacted to an earlier index, keeping a few entries for slow
    # followers), or more if it keeps its own durable state. Entries up to it are not
    # handed out again in committed_entries.
    applied: int = 0

    def validate(self) -> None:
        if self.id <= 0:
            raise ConfigError("id", f"must be a positive integer, got {self.id}")
        if not self.voters:
            raise ConfigError("voters", "at least one voter is needed")
        if any(v <= 0 for v in self.voters):
            raise ConfigError("voters", f"ids must be positive integers, got {self.voters}")
        if len(set(self.voters)) != len(self.voters):
            raise ConfigError("voters", f"duplicate ids in {self.voters}")
        if self.id not in self.voters:
            raise ConfigError("id", f"{self.id} is not one of the voters {self.voters}")
        if self.heartbeat_tick <= 0:
            raise ConfigError("heartbeat_tick", "must be positive")
        if self.election_tick <= self.heartbeat_tick:
            raise ConfigError("election_tick", "must be greater than heartbeat_tick")
        if self.max_inflight_msgs <= 0:
            raise ConfigError("max_inflight_msgs", "must be positive")
        if self.max_uncommitted_entries is not None and self.max_uncommitted_entries <= 0:
            raise ConfigError("max_uncommitted_entries", "must be positive (or None)")
        if self.applied < 0:
            raise ConfigError("applied", "must not be negative")
