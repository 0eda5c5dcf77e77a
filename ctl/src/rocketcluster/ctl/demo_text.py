"""The demos' story, one line per step, written as the step happens (pure: numbers in,
text out; ``--json`` prints the report instead)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from rocketcluster.ctl.client_errors import summarise

__all__ = [
    "audit_line",
    "client_library_line",
    "elected_line",
    "failed_sends_line",
    "group_line",
    "killed_line",
    "number",
    "produced_line",
    "ready_line",
    "seconds",
    "security_line",
    "standalone_consumed_line",
    "standalone_lookup_line",
    "standalone_produced_line",
    "starting_line",
    "stopped_line",
    "store_audit_line",
    "store_killed_line",
    "store_recovered_line",
    "store_writing_line",
    "verdict_line",
]


def number(n: int) -> str:
    """1234 -> "1,234"."""
    return f"{n:,}"


def seconds(s: float) -> str:
    """Two digits under a second (0.26 s), one above (6.2 s)."""
    if math.isinf(s):
        return "never"
    return f"{s:.2f} s" if s < 1 else f"{s:.1f} s"


def _plural(n: int, word: str) -> str:
    if n == 1:
        return f"1 {word}"
    return f"{number(n)} {word}" + ("es" if word.endswith("s") else "s")


# -- rocketctl demo cluster -----------------------------------------------------------


def starting_line(name: str, manifest: str, controllers: int, groups: int, replicas: int) -> str:
    shape = f"{_plural(groups, 'broker group')} x {_plural(replicas, 'replica')}"
    if controllers:
        shape = f"{_plural(controllers, 'controller')}, {shape}"
    return f"starting {name} from {manifest}: {shape} ..."


def ready_line(processes: int, took: float, group_endpoints: Mapping[str, str]) -> str:
    where = ", ".join(f"{g} at {e}" for g, e in group_endpoints.items())
    return f"ready in {seconds(took)}: {_plural(processes, 'process')}" + (
        f"; clients connect to {where}" if where else ""
    )


def security_line(ca_file: str | None, user: str | None, admin: bool = False) -> str | None:
    """How the demo reaches a cluster with security on, in one line (None: it is off)."""
    if ca_file is None and user is None:
        return None
    on = [f"TLS on every port (CA {ca_file})"] if ca_file is not None else []
    how = []
    if user is not None:
        on.append("auth on")
        how.append(f"producing and auditing as user {user}" + (" (an admin)" if admin else ""))
    calls = "admin calls over https" if ca_file is not None else "admin calls"
    how.append(calls + (" with the admin token" if user is not None else ""))
    return f"{' and '.join(on)}: {'; '.join(how)}"


def group_line(group: str, master: str, epoch: int, in_sync: int, replicas: int) -> str:
    return f"{group}: master {master} (epoch {epoch}), SyncStateSet {in_sync}/{replicas}"


def produced_line(producers: int, topic: str, acknowledged: int, took: float) -> str:
    return (
        f"producing to topic {topic} with the official RocketMQ 5 Python client "
        f"({_plural(producers, 'producer')}): {number(acknowledged)} acknowledged "
        f"in {seconds(took)}"
    )


def killed_line(name: str, group: str) -> str:
    return f"SIGKILL {name}, the master of {group}, while the producers keep sending"


def elected_line(new: str, after: float, epoch: int | None, reason: str) -> str:
    detail = "; ".join(part for part in (f"epoch {epoch}" if epoch else "", reason) if part)
    return f"new master {new} serving after {seconds(after)}" + (f" ({detail})" if detail else "")


def failed_sends_line(failed: int, recovery: float | None, kinds: Mapping[str, int]) -> str:
    """What the producers saw: nothing, or how many sends failed, of which kind, and
    how long until a send to the group succeeded again."""
    if failed == 0:
        return "the producers saw no failed send: the group endpoint moved them to the new master"
    if recovery is None or math.isinf(recovery):
        back = "and no send to the group succeeded afterwards"
    else:
        back = f"sends to the group succeeded again after {seconds(recovery)}"
    what = summarise(kinds)
    return (
        f"the producers saw {_plural(failed, 'failed send')}"
        + (f" ({what})" if what else "")
        + f": not acknowledged, so not owed; {back}"
    )


def audit_line(acknowledged: int, read_back: int, lost: int, twice: int) -> str:
    line = (
        f"{number(acknowledged)} acknowledged, {number(read_back)} read back "
        f"with a consumer group, lost {number(lost)}"
    )
    if twice:
        line += (
            f"; {_plural(twice, 'message')} read at two offsets "
            "(delivery is at least once: a send the client retried)"
        )
    return line


def client_library_line(
    kinds: Mapping[str, int], levels: Mapping[str, int], log_file: str | None
) -> str | None:
    """The official client's own complaints in one line (None when it had none): the
    whole lines are in its log file."""
    if sum(kinds.values()) == 0:
        return None
    how_many = " and ".join(
        _plural(levels[level], level) for level in ("error", "warning") if levels.get(level)
    )
    where = f"; whole lines in {log_file}" if log_file else ""
    return f"the client library logged {how_many}: {summarise(kinds)}{where}"


def stopped_line(stopped: int, directory: str, data_removed: bool) -> str:
    kept = "logs" if data_removed else "logs and data"
    return f"stopped {_plural(stopped, 'process')}; {kept} stay in {directory}"


def verdict_line(problems: Sequence[str], ok: str) -> str:
    return f"verdict: {ok}" if not problems else "verdict: FAILED - " + "; ".join(problems)


def console_lines(manifest: str) -> list[str]:
    """Where to look next: the same cluster, kept running, in the web console."""
    return [
        "see it in the web console: "
        f".venv/bin/rocketctl local up -f {manifest} --dir .rocketcluster",
        "  then .venv/bin/rocketctl console --dir .rocketcluster and open http://localhost:8090/",
    ]


# -- rocketctl demo standalone --------------------------------------------------------


def standalone_produced_line(count: int, topic: str, took: float) -> str:
    return (
        f"produced {number(count)} messages to topic {topic}, one by one, with the official "
        f"RocketMQ 5 Python client in {seconds(took)}"
    )


def standalone_consumed_line(received: int, group: str, took: float, missing: int) -> str:
    return (
        f"consumed and acknowledged {number(received)} with its SimpleConsumer "
        f"(group {group}) in {seconds(took)}; missing {number(missing)}"
    )


def standalone_lookup_line(message_id: str, body: str, keys: Sequence[str]) -> str:
    return f"looked up {message_id} by id: body {body!r}, keys {list(keys)}"


# -- rocketctl demo store -------------------------------------------------------------


def store_writing_line(writers: int, kill_after: int, directory: str) -> str:
    return (
        f"a child process appends with sync flush from {writers} tasks into {directory}; "
        f"SIGKILL after {number(kill_after)} acknowledgements ..."
    )


def store_killed_line(acknowledged: int, per_s: int) -> str:
    return f"killed: {number(acknowledged)} records acknowledged ({number(per_s)}/s)"


def store_recovered_line(took: float, log_end: int, reason: str, redispatched: int) -> str:
    return (
        f"reopened: recovery took {seconds(took)}, log end at byte {number(log_end)} "
        f"({reason}), {number(redispatched)} records re-dispatched to the queues"
    )


def store_audit_line(acknowledged: int, stored: int, consumed: int, lost: int) -> str:
    return (
        f"{number(acknowledged)} acknowledged, {number(stored)} in the log, "
        f"{number(consumed)} read through the consume queues, lost {number(lost)}"
    )
