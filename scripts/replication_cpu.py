"""Per-process CPU µs per message of a 3-replica sync 2-of-3 group under the lean
client (issue #18, SLAVE part): a quick before/after loop, not a benchmark of record.

    python3 -m uv run --frozen python scripts/replication_cpu.py [seconds] [--spy DIR] [--syscalls]

Starts ``ha_cluster(mode="sync")`` with ``running()``, drives the master with
``lean_produce`` for ``seconds``, reads utime+stime of every broker from
/proc/<pid>/stat before and after, and (with --spy) records a py-spy flame graph of
one slave and the master while the load runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rocketcluster.ctl.bench.client_bench import lean_produce
from rocketcluster.ctl.workload import TOPIC, ha_cluster, running

TICK = os.sysconf("SC_CLK_TCK")
IDLE_S = 5.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def threads_cpu(pid: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / TICK
    return out


def self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


SYSCALLS = ("sendmsg", "recvmsg", "write", "read", "epoll_wait")


def perf_counts(path: Path, msgs: int) -> dict[str, float]:
    """``perf stat -x ,`` output: per syscall, how many per 1000 messages."""
    out: dict[str, float] = {}
    for line in path.read_text().splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[2].startswith("syscalls:sys_enter_"):
            count = int(fields[0]) if fields[0].isdigit() else 0
            out[fields[2].removeprefix("syscalls:sys_enter_")] = round(count / msgs * 1000, 1)
    return out


def main() -> None:
    args = sys.argv[1:]
    spy = None
    if "--spy" in args:
        i = args.index("--spy")
        spy = Path(args[i + 1])
        del args[i : i + 2]
    # --syscalls: count each broker's socket syscalls during the load with ``perf
    # stat`` (kernel tracepoints, next to no overhead): how many stream writes and
    # reads — HA frames and acks, mostly — a message costs.
    syscalls = "--syscalls" in args
    if syscalls:
        args.remove("--syscalls")
    seconds = float(args[0]) if args else 10.0
    with (
        tempfile.TemporaryDirectory(prefix="repcpu-") as tmp,
        running(Path(tmp), ha_cluster(mode="sync", name="rc")) as cluster,
    ):
        master = cluster.master()
        brokers = cluster.brokers()
        endpoint = master["addresses"]["client"]
        asyncio.run(lean_produce(endpoint, 1.5, TOPIC))  # warm up
        roles = {p["name"]: ("master" if p["name"] == master["name"] else "slave") for p in brokers}
        pids = {p["name"]: p["pid"] for p in brokers}
        spies = []
        if spy is not None:
            spy.mkdir(parents=True, exist_ok=True)
            slave = next(n for n in pids if roles[n] == "slave")
            for name in (slave, master["name"]):
                spies.append(
                    subprocess.Popen(
                        [
                            str(Path(sys.executable).parent / "py-spy"),
                            "record",
                            "--pid",
                            str(pids[name]),
                            "-d",
                            str(int(seconds) - 1),
                            "--nonblocking",
                            "--gil",
                            "-r",
                            "200",
                            "-f",
                            "raw",
                            "-o",
                            str(spy / f"{roles[name]}.txt"),
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
        idle0 = {n: cpu_s(p) for n, p in pids.items()}
        time.sleep(IDLE_S)
        idle = {n: (cpu_s(p) - idle0[n]) / IDLE_S for n, p in pids.items()}
        before = {n: cpu_s(p) for n, p in pids.items()}
        tbefore = {n: threads_cpu(p) for n, p in pids.items()}
        if syscalls:
            for name, pid in pids.items():
                events = ",".join(f"syscalls:sys_enter_{c}" for c in SYSCALLS)
                counted = str(Path(tmp) / f"perf-{name}.txt")
                spies.append(
                    subprocess.Popen(
                        [
                            *("perf", "stat", "-x", ",", "-e", events, "-p", str(pid)),
                            *("-o", counted, "sleep", str(seconds)),
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
        client_before = self_cpu()
        result = asyncio.run(lean_produce(endpoint, seconds, TOPIC))
        client_used = self_cpu() - client_before
        after = {n: cpu_s(p) for n, p in pids.items()}
        tafter = {n: threads_cpu(p) for n, p in pids.items()}
        for s in spies:
            s.wait(timeout=60)
        msgs = result["messages"]
        out = {
            "messages": msgs,
            "msgs_per_s": round(result["msgs_per_s"]),
            "client_us_per_msg": round(client_used / msgs * 1e6, 1),
        }
        for n in pids:
            used = after[n] - before[n]
            out[f"{roles[n]}:{n}"] = round(used / msgs * 1e6, 1)
            # What the process burns with no load (timers, heartbeats, metrics) taken
            # out: at a few hundred msgs/s on a busy machine it is most of the above.
            net = used - idle[n] * result["seconds"]
            out[f"{roles[n]}:{n}:less_idle"] = round(net / msgs * 1e6, 1)
            out[f"{roles[n]}:{n}:idle_cpu_pct"] = round(idle[n] * 100, 1)
            out[f"{roles[n]}:{n}:threads"] = {
                t: round((v - tbefore[n].get(t, 0.0)) / msgs * 1e6, 1)
                for t, v in tafter[n].items()
                if v - tbefore[n].get(t, 0.0) > 0
            }
            if syscalls:
                out[f"{roles[n]}:{n}:syscalls_per_1000_msgs"] = perf_counts(
                    Path(tmp) / f"perf-{n}.txt", msgs
                )
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
