"""ReplicasState: the controller's replicated state machine (pure, deterministic).

Per broker group, as RocketMQ 5's ReplicasInfoManager keeps it: broker ids with their
addresses, the master id, ``master_epoch``, the ``sync_state_set`` and its epoch; plus
topic routes (the name server role), the cluster's catalogue (topics, consumer groups,
each broker group's client endpoint and write flag, under a ``catalogue_version`` that
rises with every change, so brokers poll it cheaply) and a history of every change.
Commands arrive in Raft order and are validated here against the epochs they were
based on, so a stale command fails the same way on every member. What depends on
liveness (who is alive, who should win an election) is decided by the leader before it
proposes, and travels inside the command.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Final

from pydantic import BaseModel, ValidationError

from rocketcluster.api.topics import ConsumerGroupSpec, TopicSpec

HISTORY_LIMIT: Final = 10_000


class ControllerCode(StrEnum):
    """Result codes, named as RocketMQ's ResponseCode for the controller."""

    SUCCESS = "SUCCESS"
    CONTROLLER_FENCED_MASTER_EPOCH = "CONTROLLER_FENCED_MASTER_EPOCH"
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = "CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH"
    CONTROLLER_INVALID_MASTER = "CONTROLLER_INVALID_MASTER"
    CONTROLLER_INVALID_REPLICAS = "CONTROLLER_INVALID_REPLICAS"
    CONTROLLER_BROKER_NOT_ALIVE = "CONTROLLER_BROKER_NOT_ALIVE"
    CONTROLLER_MASTER_STILL_EXIST = "CONTROLLER_MASTER_STILL_EXIST"
    CONTROLLER_MASTER_NOT_AVAILABLE = "CONTROLLER_MASTER_NOT_AVAILABLE"
    CONTROLLER_ELECT_MASTER_FAILED = "CONTROLLER_ELECT_MASTER_FAILED"
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = "CONTROLLER_BROKER_NEED_TO_BE_REGISTERED"
    CONTROLLER_BROKER_ID_INVALID = "CONTROLLER_BROKER_ID_INVALID"
    CONTROLLER_INVALID_REQUEST = "CONTROLLER_INVALID_REQUEST"
    CONTROLLER_NOT_LEADER = "CONTROLLER_NOT_LEADER"
    # Ours (RocketMQ keeps topics and groups on the name servers and brokers):
    CONTROLLER_NOT_FOUND = "CONTROLLER_NOT_FOUND"
    CONTROLLER_BROKER_STILL_ALIVE = "CONTROLLER_BROKER_STILL_ALIVE"
    CONTROLLER_TRANSFER_FAILED = "CONTROLLER_TRANSFER_FAILED"
    CONTROLLER_TRANSFER_TIMEOUT = "CONTROLLER_TRANSFER_TIMEOUT"


@dataclass
class BrokerReplica:
    broker_id: int
    address: str
    register_check_code: str = ""


@dataclass
class BrokerGroup:
    """One broker group's replica info (SyncStateInfo + BrokerReplicaInfo)."""

    cluster: str
    name: str
    replicas: dict[int, BrokerReplica] = field(default_factory=dict)
    master_id: int | None = None
    master_epoch: int = 0
    sync_state_set: list[int] = field(default_factory=list)
    sync_state_set_epoch: int = 0

    def view(self) -> dict[str, Any]:
        master = self.replicas.get(self.master_id) if self.master_id is not None else None
        return {
            "cluster": self.cluster,
            "group": self.name,
            "masterId": self.master_id,
            "masterAddress": master.address if master else "",
            "masterEpoch": self.master_epoch,
            "syncStateSet": sorted(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch,
            "replicas": {str(r.broker_id): r.address for r in self.replicas.values()},
        }


@dataclass
class GroupEntry:
    """A broker group's line in the catalogue (``BrokerGroupEntry`` of the contract)."""

    endpoint: str = ""
    writable: bool = True


@dataclass(frozen=True)
class Result:
    code: ControllerCode
    message: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.code is ControllerCode.SUCCESS


def ok(message: str = "", **data: Any) -> Result:
    return Result(ControllerCode.SUCCESS, message, data)


def _summary(command: dict[str, Any]) -> dict[str, Any]:
    """The command as the history keeps it: a batch of catalogue entries by its
    counts (a thousand specs in every event would crowd the history out)."""
    if command.get("type") != "PutCatalogueEntries":
        return command
    return {
        "type": command["type"],
        "topics": len(command.get("topics") or []),
        "consumerGroups": len(command.get("consumerGroups") or []),
    }


def fail(code: ControllerCode, message: str) -> Result:
    return Result(code, message)


def validation_problems(exc: ValidationError, model: type[BaseModel]) -> str:
    """pydantic's errors as one line a person can act on."""
    allowed = ", ".join(f.alias or n for n, f in model.model_fields.items())
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = f"unknown field (the fields are {allowed})"
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


class ReplicasState:
    def __init__(self) -> None:
        self.groups: dict[str, BrokerGroup] = {}
        self.routes: dict[str, dict[str, Any]] = {}
        self.topics: dict[str, dict[str, Any]] = {}  # TopicSpec JSON (camelCase) by name
        self.consumer_groups: dict[str, dict[str, Any]] = {}  # ConsumerGroupSpec JSON
        self.group_entries: dict[str, GroupEntry] = {}  # only groups in ``groups``
        self.catalogue_version = 0
        self.history: list[dict[str, Any]] = []
        self.applied_index = 0

    # -- the one entry point -----------------------------------------------------

    def apply(self, index: int, command: dict[str, Any], time_ms: int) -> Result:
        """Apply the command committed at ``index`` (``time_ms`` is the leader's clock
        when it proposed, so history times agree on every member)."""
        self.applied_index = index
        kind = command.get("type", "")
        handler = _HANDLERS.get(kind)
        if handler is None:
            return fail(ControllerCode.CONTROLLER_INVALID_REQUEST, f"unknown command {kind!r}")
        result: Result = handler(self, command)
        changed = result.ok or result.code is ControllerCode.CONTROLLER_MASTER_NOT_AVAILABLE
        if changed and kind != "Noop" and result.data.get("changed", True):
            self._record(time_ms, _summary(command), result)
        return result

    def _record(self, time_ms: int, command: dict[str, Any], result: Result) -> None:
        group = self.groups.get(command.get("group", ""))
        event = {
            "index": self.applied_index,
            "time": time_ms,
            "command": command.get("type"),
            "group": command.get("group", ""),
            "reason": command.get("reason", ""),
            "detail": {k: v for k, v in command.items() if k not in ("type", "group", "reason")},
        }
        if group is not None:
            event.update(
                {
                    "masterId": group.master_id,
                    "masterEpoch": group.master_epoch,
                    "syncStateSet": sorted(group.sync_state_set),
                    "syncStateSetEpoch": group.sync_state_set_epoch,
                }
            )
        self.history.append(event)
        if len(self.history) > HISTORY_LIMIT:
            del self.history[: len(self.history) - HISTORY_LIMIT]

    # -- registration -----------------------------------------------------------

    def _apply_broker_id(self, c: dict[str, Any]) -> Result:
        """A broker asks for an id (RocketMQ's ApplyBrokerId): the id it proposes must
        be the next free one, or already be its own (same check code: a retry)."""
        group = self.groups.get(c["group"])
        if group is None:
            group = self.groups[c["group"]] = BrokerGroup(c.get("cluster", ""), c["group"])
            self.catalogue_version += 1  # the catalogue lists every known group
        wanted = int(c["brokerId"])
        existing = group.replicas.get(wanted)
        if existing is not None:
            if existing.register_check_code == c["checkCode"]:
                return ok("already applied", brokerId=wanted)
            return fail(
                ControllerCode.CONTROLLER_BROKER_ID_INVALID,
                f"broker id {wanted} of {group.name} belongs to another broker",
            )
        for replica in group.replicas.values():
            if replica.register_check_code == c["checkCode"]:
                return ok("already applied", brokerId=replica.broker_id)
        next_id = max(group.replicas, default=0) + 1
        if wanted != next_id:
            return fail(
                ControllerCode.CONTROLLER_BROKER_ID_INVALID,
                f"broker id {wanted} is not the next free id of {group.name} ({next_id})",
            )
        group.replicas[wanted] = BrokerReplica(wanted, c["address"], c["checkCode"])
        return ok("applied", brokerId=wanted)

    def _register_broker(self, c: dict[str, Any]) -> Result:
        group = self.groups.get(c["group"])
        replica = group.replicas.get(int(c["brokerId"])) if group else None
        if group is None or replica is None:
            return fail(
                ControllerCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"broker {c['brokerId']} of {c['group']} has no id yet: apply for one first",
            )
        replica.address = c["address"]
        endpoint = str(c.get("clientEndpoint") or "")
        if endpoint:
            entry = self.group_entries.setdefault(group.name, GroupEntry())
            if entry.endpoint != endpoint:
                entry.endpoint = endpoint
                self.catalogue_version += 1
        return ok("registered", **group.view())

    # -- SyncStateSet -------------------------------------------------------------

    def _alter_sync_state_set(self, c: dict[str, Any]) -> Result:
        group = self.groups.get(c["group"])
        if group is None:
            return fail(
                ControllerCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, f"no group {c['group']}"
            )
        if int(c["masterEpoch"]) != group.master_epoch:
            return fail(
                ControllerCode.CONTROLLER_FENCED_MASTER_EPOCH,
                f"master epoch {c['masterEpoch']} is not the current {group.master_epoch}",
            )
        if int(c["syncStateSetEpoch"]) != group.sync_state_set_epoch:
            return fail(
                ControllerCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                f"sync state set epoch {c['syncStateSetEpoch']} is not the current "
                f"{group.sync_state_set_epoch}",
            )
        if group.master_id is None or int(c["masterId"]) != group.master_id:
            return fail(
                ControllerCode.CONTROLLER_INVALID_MASTER,
                f"broker {c['masterId']} is not the master of {group.name} ({group.master_id})",
            )
        new_set = sorted({int(b) for b in c["syncStateSet"]})
        unknown = [b for b in new_set if b not in group.replicas]
        if unknown:
            return fail(ControllerCode.CONTROLLER_INVALID_REPLICAS, f"unknown brokers {unknown}")
        if group.master_id not in new_set:
            return fail(
                ControllerCode.CONTROLLER_INVALID_REPLICAS,
                "the sync state set must contain the master",
            )
        dead = [b for b in new_set if b in c.get("notAlive", [])]
        if dead:
            return fail(ControllerCode.CONTROLLER_BROKER_NOT_ALIVE, f"brokers {dead} are not alive")
        group.sync_state_set = new_set
        group.sync_state_set_epoch += 1
        return ok("altered", **group.view())

    # -- elections ----------------------------------------------------------------

    def _elect_master(self, c: dict[str, Any]) -> Result:
        """The leader chose ``newMaster`` (or None) from liveness; here the choice is
        checked against the epochs it was based on and applied: a new master gets a
        set of itself and both epochs rise; no winner keeps the set, drops the master
        and raises the master epoch."""
        group = self.groups.get(c["group"])
        if group is None:
            return fail(
                ControllerCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, f"no group {c['group']}"
            )
        if int(c["masterEpoch"]) != group.master_epoch:
            return fail(
                ControllerCode.CONTROLLER_FENCED_MASTER_EPOCH,
                f"election based on master epoch {c['masterEpoch']}, now {group.master_epoch}",
            )
        new_master = c.get("newMaster")
        if new_master is None:
            group.master_id = None
            group.master_epoch += 1
            return Result(
                ControllerCode.CONTROLLER_MASTER_NOT_AVAILABLE,
                f"no broker of {group.name} can be master",
                group.view(),
            )
        new_master = int(new_master)
        if new_master not in group.replicas:
            return fail(ControllerCode.CONTROLLER_INVALID_REPLICAS, f"unknown broker {new_master}")
        group.master_id = new_master
        group.master_epoch += 1
        group.sync_state_set = [new_master]
        group.sync_state_set_epoch += 1
        return ok("elected", unclean=bool(c.get("unclean")), **group.view())

    # -- routes -------------------------------------------------------------------

    def _put_route(self, c: dict[str, Any]) -> Result:
        self.routes[c["topic"]] = {
            "queues": int(c["queues"]),
            "messageType": c.get("messageType", "NORMAL"),
            "groups": list(c.get("groups", [])),
        }
        return ok("route stored")

    def _delete_route(self, c: dict[str, Any]) -> Result:
        if self.routes.pop(c["topic"], None) is None:
            return fail(ControllerCode.CONTROLLER_INVALID_REQUEST, f"no route for {c['topic']}")
        return ok("route deleted")

    # -- the catalogue ----------------------------------------------------------------

    def catalogue(self) -> dict[str, Any]:
        """The catalogue as ``rocketcluster.api.catalogue.Catalogue`` reads it: every
        known broker group appears, with endpoint "" until one of its brokers names it."""
        return {
            "version": self.catalogue_version,
            "topics": [dict(self.topics[n]) for n in sorted(self.topics)],
            "consumerGroups": [dict(self.consumer_groups[n]) for n in sorted(self.consumer_groups)],
            "groups": {
                n: asdict(self.group_entries.get(n, GroupEntry())) for n in sorted(self.groups)
            },
        }

    def _put_topic(self, c: dict[str, Any]) -> Result:
        return self._put_spec(self.topics, TopicSpec, "topic", c)

    def _delete_topic(self, c: dict[str, Any]) -> Result:
        return self._delete_spec(self.topics, "topic", c)

    def _put_consumer_group(self, c: dict[str, Any]) -> Result:
        return self._put_spec(self.consumer_groups, ConsumerGroupSpec, "consumer group", c)

    def _delete_consumer_group(self, c: dict[str, Any]) -> Result:
        return self._delete_spec(self.consumer_groups, "consumer group", c)

    def _put_spec(
        self, table: dict[str, dict[str, Any]], model: type[BaseModel], kind: str, c: dict[str, Any]
    ) -> Result:
        """Store a spec in its canonical JSON, so an unchanged put is recognised (and
        changes neither the version nor the history); optional limits left unset are
        left out, as before they existed."""
        try:
            spec = model.model_validate(c.get("spec")).model_dump(
                mode="json", by_alias=True, exclude_none=True
            )
        except ValidationError as exc:
            return fail(
                ControllerCode.CONTROLLER_INVALID_REQUEST,
                f"invalid {kind}: {validation_problems(exc, model)}",
            )
        name = spec["name"]
        if table.get(name) == spec:
            return ok(f"{kind} {name} unchanged", changed=False, version=self.catalogue_version)
        verb = "updated" if name in table else "created"
        table[name] = spec
        self.catalogue_version += 1
        return ok(f"{kind} {name} {verb}", version=self.catalogue_version, spec=spec)

    def _put_entries(self, c: dict[str, Any]) -> Result:
        """Put many topics and consumer groups at once (a manifest of thousands in a
        few commands, not one Raft entry and one fsync each): every spec is checked
        before any is stored, so a bad one refuses the whole batch; the version rises
        once when anything changed."""
        groups = c.get("consumerGroups") or []
        batches = (
            (self.topics, TopicSpec, "topic", c.get("topics") or []),
            (self.consumer_groups, ConsumerGroupSpec, "consumer group", groups),
        )
        valid: list[tuple[dict[str, dict[str, Any]], dict[str, Any]]] = []
        for table, model, kind, specs in batches:
            for raw in specs:
                try:
                    spec = model.model_validate(raw).model_dump(
                        mode="json", by_alias=True, exclude_none=True
                    )
                except ValidationError as exc:
                    return fail(
                        ControllerCode.CONTROLLER_INVALID_REQUEST,
                        f"invalid {kind}: {validation_problems(exc, model)}",
                    )
                valid.append((table, spec))
        changed = 0
        for table, spec in valid:
            if table.get(spec["name"]) != spec:
                table[spec["name"]] = spec
                changed += 1
        if changed:
            self.catalogue_version += 1
        return ok(
            f"{changed} of {len(valid)} catalogue entries changed",
            changed=changed > 0,
            entries=changed,
            version=self.catalogue_version,
        )

    def _delete_spec(
        self, table: dict[str, dict[str, Any]], kind: str, c: dict[str, Any]
    ) -> Result:
        name = str(c.get("name", ""))
        if table.pop(name, None) is None:
            return fail(ControllerCode.CONTROLLER_NOT_FOUND, f"no {kind} {name!r} in the catalogue")
        self.catalogue_version += 1
        return ok(f"{kind} {name} deleted", version=self.catalogue_version)

    def _set_group_writable(self, c: dict[str, Any]) -> Result:
        """Write-disable a group for a drain (routes then offer it read-only), or undo it."""
        name = str(c.get("group", ""))
        writable = c.get("writable")
        if not isinstance(writable, bool):
            return fail(
                ControllerCode.CONTROLLER_INVALID_REQUEST,
                f"writable must be true or false, not {writable!r}",
            )
        if name not in self.groups:
            return fail(
                ControllerCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"no broker group {name!r}: none of its brokers has registered",
            )
        entry = self.group_entries.setdefault(name, GroupEntry())
        state = "writable" if writable else "read-only"
        if entry.writable is writable:
            return ok(
                f"broker group {name} is {state} already",
                changed=False,
                version=self.catalogue_version,
            )
        entry.writable = writable
        self.catalogue_version += 1
        return ok(f"broker group {name} is {state}", version=self.catalogue_version)

    def _forget_group(self, c: dict[str, Any]) -> Result:
        """Drop a removed group: its replica info and its catalogue entry. The leader
        proposes this only when none of the group's brokers is alive."""
        name = str(c.get("group", ""))
        if self.groups.pop(name, None) is None:
            return fail(
                ControllerCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, f"no broker group {name!r}"
            )
        self.group_entries.pop(name, None)
        self.catalogue_version += 1
        return ok(f"broker group {name} forgotten", version=self.catalogue_version)

    def _noop(self, c: dict[str, Any]) -> Result:
        return ok()

    # -- snapshots ----------------------------------------------------------------

    def snapshot(self) -> bytes:
        data = {
            "applied": self.applied_index,
            "groups": {n: asdict(g) for n, g in self.groups.items()},
            "routes": self.routes,
            "catalogue": {
                "version": self.catalogue_version,
                "topics": self.topics,
                "consumerGroups": self.consumer_groups,
                "groups": {n: asdict(e) for n, e in self.group_entries.items()},
            },
            "history": self.history,
        }
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def restore(cls, raw: bytes) -> ReplicasState:
        data = json.loads(raw)
        state = cls()
        state.applied_index = int(data["applied"])
        for name, g in data["groups"].items():
            replicas = {int(k): BrokerReplica(**v) for k, v in g.pop("replicas").items()}
            state.groups[name] = BrokerGroup(**g, replicas=replicas)
        state.routes = data["routes"]
        state.history = data["history"]
        catalogue = data.get("catalogue")
        if catalogue is None:
            # Written before the catalogue existed. The old code only ever added groups,
            # so this is the version a replay of its whole log would reach: every member
            # agrees, whichever index its snapshot was taken at.
            state.catalogue_version = len(state.groups)
            return state
        state.catalogue_version = int(catalogue["version"])
        state.topics = catalogue["topics"]
        state.consumer_groups = catalogue["consumerGroups"]
        state.group_entries = {n: GroupEntry(**e) for n, e in catalogue["groups"].items()}
        return state

    def events_since(self, time_ms: int, group: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.history
            if e["time"] >= time_ms and (group is None or e["group"] == group)
        ]


_HANDLERS = {
    "ApplyBrokerId": ReplicasState._apply_broker_id,
    "RegisterBroker": ReplicasState._register_broker,
    "AlterSyncStateSet": ReplicasState._alter_sync_state_set,
    "ElectMaster": ReplicasState._elect_master,
    "PutRoute": ReplicasState._put_route,
    "DeleteRoute": ReplicasState._delete_route,
    "PutTopic": ReplicasState._put_topic,
    "DeleteTopic": ReplicasState._delete_topic,
    "PutConsumerGroup": ReplicasState._put_consumer_group,
    "DeleteConsumerGroup": ReplicasState._delete_consumer_group,
    "PutCatalogueEntries": ReplicasState._put_entries,
    "SetGroupWritable": ReplicasState._set_group_writable,
    "ForgetGroup": ReplicasState._forget_group,
    "Noop": ReplicasState._noop,
}
