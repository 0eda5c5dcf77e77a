"""Run the chaos suite: ``python -m rocketcluster.ctl.chaos.run --scenarios fixed|soak
--seed S --duration SECONDS --out DIR``.

The runner first makes sure iptables is there (installing it needs the network, so
before anything is contained), then runs itself again under ``unshare --mount --net
--pid --fork --mount-proc`` with a tmpfs on /run/netns: whatever happens, when the
run ends the kernel ends every process it started and every namespace vanishes. It
still cleans up on its own. Inside, each controller and broker runs in its own
network namespace (``netns``); the workload, the group endpoints and the checker
stay in the runner's. Where namespaces cannot be had, only kill and pause faults run,
on loopback, every network fault is reported as SKIPPED — loudly — and the run fails
unless ``--loopback`` asked for exactly that.

A soak (``--scenarios soak --faults N``) can stop and go on: ``DIR/state.json`` says
how far it got (written after every episode), its cluster's data and disks stay in
``DIR/work``, and ``--resume`` starts a new session on them — same seed, the schedule
from the next episode, the history appended — until N faults ran; then the final
checks cover every session. It stops between episodes on SIGINT/SIGTERM or when the
file ``DIR/STOP`` appears; a killed run resumes from its last finished episode.

Output in DIR: ``history.jsonl``, ``summary.json``, ``report.txt``, ``timeline.png``
and the processes' logs. Exit status 1 when anything acknowledged was lost, anything
unexpected was delivered, an offset was inconsistent, FIFO order broke, the cluster
did not come back whole after the final heal, or a broker's event loop was held on CPU
past the heartbeat timeout (broker_logs.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.chaos import broker_logs, netns
from rocketcluster.ctl.chaos.backend import ChaosBackend, LocalChaosBackend
from rocketcluster.ctl.chaos.checker import check
from rocketcluster.ctl.chaos.drain import DrainWatch
from rocketcluster.ctl.chaos.episodes import EpisodeRunner, wait_healthy
from rocketcluster.ctl.chaos.faults import Injector
from rocketcluster.ctl.chaos.history import INFO, History, iter_history_file
from rocketcluster.ctl.chaos.report import skipped_banner, summary_text
from rocketcluster.ctl.chaos.roles import ClusterProbe
from rocketcluster.ctl.chaos.schedule import Episode, fixed, settle_seconds, skip, soak
from rocketcluster.ctl.chaos.sessions import (
    RunState,
    acknowledged,
    crashes,
    retired_by_retention,
)
from rocketcluster.ctl.chaos.timeline import render, render_recovery
from rocketcluster.ctl.chaos.workload import (
    AUDIT_GROUP,
    FIFO_GROUP,
    FIFO_TOPIC,
    NORMAL_GROUP,
    NORMAL_TOPIC,
    OFFICIAL_FIFO_GROUP,
    OFFICIAL_FIFO_TOPIC,
    OFFICIAL_GROUP,
    OFFICIAL_TOPIC,
    SUBSCRIPTIONS,
    TOPICS,
    Workload,
    WorkloadConfig,
)
from rocketcluster.ctl.testing import DISK_GUARDS_OFF, quiet_official_client

log = logging.getLogger("rocketcluster.chaos")

CONTAINED_ENV = "ROCKETCLUSTER_CHAOS_CONTAINED"
STOP_FILE = "STOP"
STATE_FILE = "state.json"
REPORT_FILES = ("summary.json", "report.txt", "timeline.png", "recovery.png")
WORK_DIR = "work"  # a soak's cluster and disks, kept between sessions (not committed)
REPLICAS = 3
BROKER_OVERRIDES: dict[str, Any] = {
    "segment_size": 16 << 20,
    **DISK_GUARDS_OFF,  # the audit's history must not depend on the host's disk
    "messaging": {"consumeStatePersistMs": 200},
}
# With a volume of its own, a broker meets its disk's real guards (a disk-full fault
# must bite): writes refused above 97 %, and retention there deletes only what no
# consumer group needs (the default diskFull: reject) — never what the audit reads.
VOLUME_GUARDS: dict[str, Any] = {"disk_max_used_ratio": 0.97, "disk_full_ratio": 0.97}
# Controllers snapshot their Raft state every 10 entries, so every controller kill of a
# run restarts on a snapshot holding the broker groups (the soak's first finding: such
# a restart crashed, every time, and a killed majority never came back).
CONTROLLER_OVERRIDES: dict[str, Any] = {"snapshot_every": 10}
WARMUP_S = 5.0


def chaos_cluster(groups: int) -> RocketCluster:
    """3 controllers; groups of 3 replicas acknowledging on 2 (sync); a NORMAL and a
    FIFO topic for the lean clients and another pair for the official ones, a
    consumer group for each (FIFO for FIFO) and one for the audit."""
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "chaos"},
            "spec": {
                "controller": {"replicas": 3},
                "brokers": {
                    "groups": groups,
                    "replicas": REPLICAS,
                    "flush": "async",
                    "replication": {"mode": "sync", "inSyncReplicas": 2, "minInSyncReplicas": 1},
                    # Every broker as a store process behind two fronts: the faults
                    # (kill-front among them) meet the shape of a multi-core pod.
                    "frontProcesses": 2,
                },
                "topics": [
                    {"name": NORMAL_TOPIC, "queues": 4},
                    {"name": FIFO_TOPIC, "queues": 4, "messageType": "FIFO"},
                    {"name": OFFICIAL_TOPIC, "queues": 4},
                    {"name": OFFICIAL_FIFO_TOPIC, "queues": 4, "messageType": "FIFO"},
                ],
                "consumerGroups": [
                    {"name": NORMAL_GROUP},
                    {"name": FIFO_GROUP, "fifo": True},
                    {"name": AUDIT_GROUP},
                    {"name": OFFICIAL_GROUP},
                    {"name": OFFICIAL_FIFO_GROUP, "fifo": True},
                ],
            },
        }
    )


def workload_config(endpoints: dict[str, str], session: int = 0) -> WorkloadConfig:
    """The same load whatever the number of groups (two NORMAL producers and four FIFO
    message groups in all, at least one of each per group): more groups spread it.
    ``session``: a resumed run's, so its ids never repeat an earlier session's."""
    groups = max(1, len(endpoints))
    return WorkloadConfig(
        endpoints,
        normal_producers=max(1, 2 // groups),
        message_groups=max(1, 4 // groups),
        session=session,
    )


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="The rocketcluster chaos suite.")
    parser.add_argument("--scenarios", choices=("fixed", "soak"), default="fixed")
    parser.add_argument("--seed", type=int, default=None, help="default 1; --resume: the run's")
    parser.add_argument("--duration", type=float, default=600.0, help="soak seconds of faults")
    parser.add_argument(
        "--faults", type=int, default=0, help="soak: stop after this many faults (not --duration)"
    )
    parser.add_argument(
        "--resume", action="store_true", help="soak: go on with the run in --out where it stopped"
    )
    parser.add_argument("--groups", type=int, default=2, help="broker groups")
    parser.add_argument("--out", type=Path, default=Path("e2e/chaos/reports/latest"))
    parser.add_argument("--loopback", action="store_true", help="no namespaces: kill/pause only")
    parser.add_argument("--keep", action="store_true", help="keep the cluster's data directory")
    parser.add_argument(
        "--only", default="", help="fixed: run only these fault kinds (comma-separated)"
    )
    return parser.parse_args(argv)


def contain(argv: list[str], out: Path) -> int:
    """Run this module again inside new mount, network and PID namespaces. ``sh``
    stays PID 1 there (it reaps orphans); when it exits, everything inside dies. A
    Ctrl-C reaches the contained runner itself (same terminal), which stops between
    episodes; ``sh`` and this process wait for it. A SIGTERM here asks the same by
    the stop file."""
    Path("/run/netns").mkdir(parents=True, exist_ok=True)

    def ask_stop(signum: int, frame: FrameType | None) -> None:
        out.mkdir(parents=True, exist_ok=True)
        (out / STOP_FILE).touch()

    signal.signal(signal.SIGINT, lambda signum, frame: None)
    signal.signal(signal.SIGTERM, ask_stop)
    script = 'trap : INT TERM; mount -t tmpfs rcchaos /run/netns && "$@"'
    command = [
        "unshare",
        "--mount",
        "--net",
        "--pid",
        "--fork",
        "--mount-proc",
        "sh",
        "-c",
        script,
        "sh",
        sys.executable,
        "-m",
        "rocketcluster.ctl.chaos.run",
        *argv,
    ]
    env = {**os.environ, CONTAINED_ENV: "1"}
    return subprocess.run(command, env=env, check=False).returncode


def quiet_logs() -> None:
    """The run's progress at INFO, without what drowns it."""
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # The official client reports every failed heartbeat with a traceback through
    # concurrent.futures; under faults that is expected and drowns the run's log.
    logging.getLogger("concurrent.futures").setLevel(logging.CRITICAL)
    quiet_official_client()


def main(argv: list[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parse(raw)
    quiet_logs()
    problem: str | None = "--loopback given" if args.loopback else None
    if problem is None and not os.environ.get(CONTAINED_ENV):
        problem = netns.ensure_iptables() or netns.namespaces_usable()
        if problem is None:
            return contain(raw, args.out.resolve())
    if problem is not None:
        print(skipped_banner(problem), flush=True)
    return Run(args, problem).execute()


def local_backend(args: argparse.Namespace, network_problem: str | None) -> LocalChaosBackend:
    return LocalChaosBackend(
        network_problem=network_problem,
        loopback=bool(args.loopback),
        overrides=BROKER_OVERRIDES,
        volume_overrides=VOLUME_GUARDS,
        controller_overrides=CONTROLLER_OVERRIDES,
    )


class Run:
    """One run of a schedule on a backend. ``schedule``: the soak's episodes for a
    seed and a number of groups (the local soak's by default); ``allowed_skips``:
    why faults the backend cannot inject are still a valid run (the emulated soak's
    network and disk kinds run on the local soak instead)."""

    def __init__(
        self,
        args: argparse.Namespace,
        network_problem: str | None,
        backend: ChaosBackend | None = None,
        schedule: Callable[[int, int], Iterator[Episode]] | None = None,
        allowed_skips: str = "",
        resume_command: str = "make chaos-soak RESUME=1 OUT={out}",
        label: str = "",
    ) -> None:
        self.args = args
        self.network_problem = network_problem
        self.backend = backend or local_backend(args, network_problem)
        self.soak_schedule = schedule or (lambda seed, groups: soak(seed, groups=groups))
        self.allowed_skips = allowed_skips
        self.resume_command = resume_command  # what the stop line tells to go on
        self.label = label or args.scenarios  # what the report calls the run
        self.out: Path = args.out.resolve()
        # Two groups: consumers that choose a group per receive (the official ones)
        # and faults that move traffic from one group to another need more than one.
        self.groups = args.groups
        self.notes: list[str] = []
        self.soak = args.scenarios == "soak"
        self.stop_asked = False

    # -- sessions ----------------------------------------------------------------------

    def _state(self) -> RunState:
        """A fresh run's state, or (``--resume``) the one its last session left."""
        path = self.out / STATE_FILE
        if self.args.resume:
            if not path.exists():
                raise SystemExit(
                    f"nothing to resume: {path} does not exist (start without --resume)"
                )
            state = RunState.load(path)
            if state.scenarios != self.label:
                raise SystemExit(
                    f"the run in {self.out} is a {state.scenarios} run, not {self.label}"
                )
            conflict = state.resume_conflict(self.args.seed, self.args.faults or None)
            if conflict:
                raise SystemExit(f"the run in {self.out}: {conflict}")
            if state.finished:
                raise SystemExit(
                    f"the run in {self.out} is finished; start another with a new --out"
                )
            self.groups = state.groups
            return state
        for stale in (*REPORT_FILES, STATE_FILE, "history.jsonl"):
            (self.out / stale).unlink(missing_ok=True)
        (self.out / STOP_FILE).unlink(missing_ok=True)
        shutil.rmtree(self.out / "logs", ignore_errors=True)
        shutil.rmtree(self.out / WORK_DIR, ignore_errors=True)
        return RunState(
            scenarios=self.label,
            seed=1 if self.args.seed is None else self.args.seed,
            groups=self.groups,
            target_faults=self.args.faults,
            duration_s=self.args.duration,
        )

    def _should_stop(self) -> bool:
        return self.stop_asked or (self.out / STOP_FILE).exists()

    def _ask_stop(self, signum: int, frame: FrameType | None) -> None:
        log.warning("stop asked (signal %d): stopping after this episode", signum)
        self.stop_asked = True

    def _done(self, state: RunState, began: float) -> bool:
        if not self.soak:
            return False
        if state.target_faults:
            return state.faults >= state.target_faults
        return state.closed_fault_seconds + (time.monotonic() - began) >= state.duration_s

    # -- the run -----------------------------------------------------------------------

    def execute(self) -> int:
        args = self.args
        started = time.monotonic()
        self.out.mkdir(parents=True, exist_ok=True)
        state = self._state()
        session = state.sessions
        resuming = session > 0
        # A soak's cluster and disks live beside its report, so a later session can
        # go on with them; the fixed suite's are thrown away.
        work = self.out / WORK_DIR if self.soak else Path(tempfile.mkdtemp(prefix="rcchaos-"))
        work.mkdir(parents=True, exist_ok=True)
        history = History(
            self.out / "history.jsonl", session=session, resume=resuming, keep=not self.soak
        )
        history.append(INFO, "note", event="session", session=session, resumed=resuming)
        signal.signal(signal.SIGINT, self._ask_stop)
        signal.signal(signal.SIGTERM, self._ask_stop)
        cluster = chaos_cluster(self.groups)
        finished = False
        healthy_at_end = False
        unhealthy: list[str] = []
        workloads: list[Workload] = []
        session_began = time.monotonic()
        faults_began = session_began
        faults_ended: float | None = None
        try:
            started_cluster = self.backend.start(cluster, work)
            self.notes += started_cluster.notes
            processes = started_cluster.processes
            probe = ClusterProbe(processes, REPLICAS, started_cluster.more_health)
            wait_healthy(probe, 120, history, "start")
            endpoints = started_cluster.group_endpoints
            history.append("info", "note", event="cluster", groups=endpoints)
            config = workload_config(endpoints, session)
            workload = Workload(config, history)
            workloads.append(workload)
            workload.start()
            time.sleep(WARMUP_S)
            injector = Injector(
                processes,
                probe,
                started_cluster.network,
                started_cluster.network_problem,
                started_cluster.volumes,
                started_cluster.volume_problem,
            )
            drain = DrainWatch(probe, SUBSCRIPTIONS, quiesce=workload.producers_paused)
            runner = EpisodeRunner(injector, probe, history, drain)
            schedule: Iterable[Episode]
            if self.soak:
                schedule = skip(self.soak_schedule(state.seed, self.groups), state.episodes)
            elif args.only:
                kinds = set(args.only.split(","))
                schedule = [
                    e for e in fixed() if any(t.fault.kind.value in kinds for t in e.faults)
                ]
            else:
                schedule = fixed()
            faults_began = time.monotonic()
            for episode in schedule:
                if self._done(state, faults_began) or self._should_stop():
                    break
                before = runner.injected
                if not runner.run(episode, settle_s=settle_seconds(episode)):
                    unhealthy.append(episode.describe())
                state.episodes += 1
                state.faults += runner.injected - before
                if self.soak:
                    self._progress(state, faults_began)
                    state.save(self.out / STATE_FILE, time.monotonic() - faults_began)
            finished = not self.soak or self._done(state, faults_began)
            # The fault phase ends with the last episode: the final heal, drain and
            # audit (13 minutes after seed 1's 1,000 faults) are not a fault's cost.
            faults_ended = time.monotonic()
            self.notes += injector.heal_everything()
            history.append("info", "note", event="final-heal" if finished else "session-end")
            healthy_at_end = wait_healthy(probe, 180, history, "final")
            # A cluster that does not outlive its session (the emulator's) is audited
            # at the end of each: what this session acknowledged, read back before it goes.
            if finished or not started_cluster.durable:
                audit = self._audit(
                    workload, probe, history, None if started_cluster.durable else session
                )
                state.audits.append(audit)
            probe.close()
        finally:
            for w in workloads:
                w.close()
            self.notes += self.backend.stop()
            history.close()
            self.backend.keep_logs(self.out)
            state.end_session((faults_ended or time.monotonic()) - faults_began)
            state.finished = finished
            state.notes += self.notes
            state.save(self.out / STATE_FILE, 0.0)
            if not self.soak or (finished and not args.keep):
                shutil.rmtree(work, ignore_errors=True)
        if not finished:
            print(
                f"\nchaos soak seed={state.seed}: stopped after {state.faults} faults "
                f"({state.episodes} episodes, {state.sessions} session(s)); go on with\n"
                f"  {self.resume_command.format(out=self.out)}\n",
                flush=True,
            )
            (self.out / STOP_FILE).unlink(missing_ok=True)
            return 0
        return self._report(state, started, healthy_at_end, unhealthy)

    def _audit(
        self, workload: Workload, probe: ClusterProbe, history: History, session: int | None
    ) -> dict[str, Any]:
        """Stop the producers, let the consumers drain, then read every queue from its
        first offset until every acknowledged id (of ``session``, or of every session)
        was found: the audit's verdict and what retention had deleted before it."""
        time.sleep(2.0)
        workload.stop_producers()
        time.sleep(6.0)  # in-flight sends complete or time out
        drained = workload.drain(quiet_s=workload.config.invisible_ms / 1000 + 4, timeout_s=90)
        history.append("info", "note", event="drained", quiet=drained)
        history.flush()
        # The acknowledgements, less what retention deleted after every consumer group
        # had it (seed 1 waited 13 minutes on 93,367 ids below the retained floor of
        # queues whose disks had been full).
        floors = probe.queue_floors(TOPICS)
        acked = acknowledged(iter_history_file(self.out / "history.jsonl"), session)
        want, retired = retired_by_retention(acked, floors)
        history.append(
            "info",
            "note",
            event="retired-before-audit",
            by_topic=retired,
            queues_with_a_floor=len(floors),
        )
        total = sum(len(ids) for ids in want.values())
        # Reading every queue from its first offset: minutes after a long soak.
        complete = workload.audit(timeout_s=max(120.0, total / 500), want=want)
        history.append("info", "note", event="audited", complete=complete)
        return {"session": session, "complete": complete, "retired": sum(retired.values())}

    def _progress(self, state: RunState, began: float) -> None:
        """One line every 25 faults: how far, at what pace."""
        if state.faults // 25 == state.reported // 25:
            return
        state.reported = state.faults
        spent = state.closed_fault_seconds + time.monotonic() - began
        goal = f"/{state.target_faults}" if state.target_faults else ""
        log.info(
            "soak: %d%s faults in %.0f s (%.1f s a fault), %d episodes",
            state.faults,
            goal,
            spent,
            spent / max(1, state.faults),
            state.episodes,
        )

    def _network_faults(self) -> str:
        if self.network_problem is None:
            return "ran"
        if self.allowed_skips:
            return f"not on this backend: {self.allowed_skips}"
        return "SKIPPED: " + self.network_problem

    def _report(
        self,
        state: RunState,
        started: float,
        healthy_at_end: bool,
        unhealthy: list[str],
    ) -> int:
        audit_complete = bool(state.audits) and all(a["complete"] for a in state.audits)
        retired_before_audit = sum(int(a["retired"]) for a in state.audits)
        path = self.out / "history.jsonl"
        summary = check(iter_history_file(path))
        crashed = crashes(iter_history_file(path))
        fault_s = round(state.fault_seconds, 1)
        summary["run"] = {
            "scenarios": state.scenarios,
            "seed": state.seed,
            "duration_requested_s": (
                state.duration_s if self.soak and not state.target_faults else None
            ),
            "faults_requested": state.target_faults or None,
            "faults_injected": state.faults,
            "episodes": state.episodes,
            "sessions": state.sessions,
            "fault_phase_s": fault_s,
            "seconds_per_fault": round(fault_s / state.faults, 2) if state.faults else None,
            "wall_time_s": round(time.monotonic() - started, 1),
            "broker_groups": self.groups,
            "replicas": REPLICAS,
            "network_faults": self._network_faults(),
            "healthy_at_end": healthy_at_end,
            "audit_complete": audit_complete,
            # Acknowledged, received by their consumer groups, then deleted by retention
            # (to free a full disk) before the audit read the queues.
            "retired_before_audit": retired_before_audit,
            "episodes_not_healthy_within_60s": unhealthy,
            "crashed": crashed,
            "notes": state.notes,
        }
        # Network faults that could not run are a failure, not a pass, unless loopback
        # (kill and pause only) was asked for.
        network_ok = (
            self.network_problem is None or bool(self.args.loopback) or bool(self.allowed_skips)
        )
        # What the brokers logged: event-loop blocks (a run with one held on CPU past the
        # heartbeat timeout fails) and POP state rebuilds.
        summary["brokers"] = broker_logs.read(self.out / "logs")
        loops_ok = not summary["brokers"]["loop_blocks"]["over_limit"]
        summary["valid"] = bool(
            summary["valid"]
            and healthy_at_end
            and network_ok
            and audit_complete
            and not crashed
            and loops_ok
        )
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        title = (
            f"rocketcluster chaos — {state.scenarios}, seed {state.seed}, "
            f"{self.groups} broker group(s) of {REPLICAS}, {state.faults} faults"
            + (f" in {state.sessions} sessions" if state.sessions > 1 else "")
            + f", lost {summary['lost']['count']}, duplicates {summary['duplicates']['count']}"
        )
        render(lambda: iter_history_file(path), summary["faults"], self.out / "timeline.png", title)
        render_recovery(summary["recovery_by_kind"], self.out / "recovery.png", title)
        text = summary_text(summary, self.out)
        (self.out / "report.txt").write_text(text + "\n")
        print(text, flush=True)
        if self.network_problem and not self.allowed_skips:
            print(skipped_banner(self.network_problem), flush=True)
        return 0 if summary["valid"] else 1


if __name__ == "__main__":
    sys.exit(main())
