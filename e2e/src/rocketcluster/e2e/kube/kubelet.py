"""kubelet for one pod: its containers as local processes, its probes and its status.

A :class:`PodWorker` runs one pod instance (one uid) from start to finish:

1. volumes and the service-account directory are made, with the pod's own
   ServiceAccount token (``NodeContext.token_for``: TokenRequest) — a missing
   ConfigMap, Secret, claim or ServiceAccount keeps the pod ``ContainerCreating``
   until it appears (a missing account also logs ``failed-mount``, kubelet's
   FailedMount);
2. init containers run one after another, each to success (retried with backoff,
   or failing the pod under ``restartPolicy: Never``);
3. every container runs in its own session, its argv and env values rewritten by
   the pod's :class:`Substitution`, its output appended to
   ``DIR/logs/<ns>/<pod>_<container>.log``; it is restarted per ``restartPolicy``
   after a backoff of 1 s doubling to 8 s (reset once it ran 10 s), counting
   ``restartCount``; startup, readiness and liveness probes run while it runs (a
   failed liveness or startup probe restarts it);
4. when the pod gets a ``deletionTimestamp`` — whatever stage it is in, a running
   init container included — every container gets SIGTERM, then SIGKILL after the
   grace period (liveness and startup probes stop, so no restart interferes); a
   container being started at that moment is killed as it appears. Once every
   process is gone the worker says so (``pod-deleted``) and the realiser removes
   its finalizer.

In process mode (the default) the image is not pulled or run: the executable is
looked up on PATH (the interpreter's own directory first, so the workspace's console
scripts are found). In image mode (:mod:`imagerun`) each container runs from its
local image with ``buildah run``: the image's entry point, its user and file system,
the volumes mounted where the pod says. preStop/postStart hooks are not run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from rocketcluster.api.status import now_rfc3339
from rocketcluster.e2e.kube import imagerun, podenv, probes, volumes
from rocketcluster.e2e.kube.launch import Launcher
from rocketcluster.e2e.kube.node import NodeContext, PodInputs
from rocketcluster.e2e.kube.podstatus import ContainerState, pod_status
from rocketcluster.e2e.kube.processes import dying_with_parent, killpg, record

BACKOFF_START_S, BACKOFF_MAX_S, BACKOFF_RESET_S = 1.0, 8.0, 10.0
SHUTDOWN_GRACE_S = 5.0
log = logging.getLogger("rocketcluster.realiser.kubelet")
__all__ = ["NodeContext", "PodInputs", "PodWorker"]


class PodWorker:
    def __init__(self, pod: Mapping[str, Any], ip: str, ctx: NodeContext) -> None:
        self.pod: Mapping[str, Any] = pod
        meta = pod["metadata"]
        self.namespace, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.ip = ip
        self.ctx = ctx
        self.dir = ctx.root / "pods" / self.namespace / f"{self.name}-{self.uid[:8]}"
        self.sa_dir = self.dir / "serviceaccount"
        self.launch = Launcher(ctx, lambda: self.pod, ip, self.dir, self.sa_dir)
        spec = pod.get("spec") or {}
        self.init_specs = list(spec.get("initContainers") or [])
        self.specs = list(spec.get("containers") or [])
        self.init = [ContainerState(c["name"], c.get("image", "")) for c in self.init_specs]
        self.containers = [ContainerState(c["name"], c.get("image", "")) for c in self.specs]
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.initialized = not self.init_specs
        self.init_failed = False
        self.start_time = now_rfc3339()
        self.deleting = asyncio.Event()
        self.gone = asyncio.Event()  # every process has exited
        self._dirty = asyncio.Event()
        self._ready = False
        self._files: list[tuple[Path, dict[str, bytes] | None]] | None = None  # as written
        self._token = volumes.TOKEN  # the ServiceAccount's, once minted (_prepare)
        # the volume files may be out of date: the last refresh failed, or the pod's
        # labels or annotations (what downward API files show) changed
        self.files_stale = False
        self._tasks: set[asyncio.Future[Any]] = set()
        self._supervisors: list[asyncio.Future[Any]] = []  # init, then one per container
        self.task: asyncio.Task[None] | None = None

    # --- what the realiser calls ---------------------------------------------------

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    def update(self, pod: Mapping[str, Any]) -> None:
        before, after = self.pod["metadata"], pod["metadata"]
        if any(before.get(k) != after.get(k) for k in ("labels", "annotations")):
            self.files_stale = True
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp") and not self.deleting.is_set():
            self.ctx.events.emit("pod-deleting", **self._who())
            self.deleting.set()

    def vanished(self) -> None:
        """Deleted without our finalizer (or forced): stop the processes anyway."""
        if not self.deleting.is_set():
            self.ctx.events.emit("pod-deleting", **self._who())
            self.deleting.set()

    def kill(self) -> list[int]:
        """A node or process failure: SIGKILL every running container."""
        pids = self.pids()
        for pid in pids:
            killpg(pid, signal.SIGKILL)
        return pids

    async def shutdown(self) -> None:
        """The realiser is stopping: end the processes, leave the API alone."""
        self.deleting.set()
        await self._stop(list(self.procs.values()), min(self._grace(), SHUTDOWN_GRACE_S))
        for task in [self.task, *self._tasks]:
            if task is not None:
                task.cancel()
        for task in [self.task, *self._tasks]:
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values() if p.returncode is None]

    @property
    def ready(self) -> bool:
        return self._ready

    def refresh_files(self) -> None:
        """Rewrite mounted ConfigMap/Secret/downward files whose content changed. The
        realiser calls it when what they are made of changed (or :attr:`files_stale`);
        one that fails (a source missing for now) leaves them stale, to be retried."""
        self.files_stale = True
        with contextlib.suppress(podenv.ConfigError, OSError):
            self._sync_volumes()
            self.files_stale = False

    # --- running the pod -----------------------------------------------------------

    def _who(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "pod": self.name, "uid": self.uid, "ip": self.ip}

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Future[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _grace(self) -> float:
        meta, spec = self.pod["metadata"], self.pod.get("spec") or {}
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", 30)
        return float(grace)

    def _changed(self) -> None:
        self._dirty.set()

    async def _run(self) -> None:
        self.ctx.events.emit("pod-created", **self._who())
        self._spawn(self._status_loop())
        self._changed()
        self._supervisors.append(self._spawn(self._start_containers()))
        try:
            # A deletion interrupts whatever stage the pod is in (an init container
            # that never ends included), as kubelet's does.
            await self.deleting.wait()
            await self._stop(list(self.procs.values()), self._grace())
            # "gone" only once no supervisor can start a process any more.
            while not all(task.done() for task in self._supervisors):
                await asyncio.gather(*self._supervisors, return_exceptions=True)
        finally:
            self.gone.set()
            self._changed()

    async def _start_containers(self) -> None:
        await self._prepare()
        if not self.deleting.is_set():
            await self._run_init()
        if self.initialized and not self.deleting.is_set():
            for spec, state in zip(self.specs, self.containers, strict=True):
                self._supervisors.append(self._spawn(self._supervise(spec, state, init=False)))

    def service_account(self) -> str:
        spec = self.pod.get("spec") or {}
        return str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")

    def _needs_token(self) -> bool:
        """Whether the pod mounts its ServiceAccount's token (the automounted
        directory, or a projected ``serviceAccountToken`` source)."""
        spec = self.pod.get("spec") or {}
        if spec.get("automountServiceAccountToken", True):
            return True
        return any(
            "serviceAccountToken" in source
            for vol in spec.get("volumes") or []
            for source in (vol.get("projected") or {}).get("sources") or []
        )

    async def _prepare(self) -> None:
        reported = ""
        while not self.deleting.is_set():
            try:
                if self.ctx.token_for is not None and self._needs_token():
                    self._token = await self.ctx.token_for(self.namespace, self.service_account())
                self._sync_volumes()
                return
            except podenv.ConfigError as exc:
                for state in self.init or self.containers:
                    state.reason, state.message = "ContainerCreating", str(exc)
                if str(exc) != reported and "MountVolume" in str(exc):
                    reported = str(exc)  # kubelet's FailedMount event, once per cause
                    self.ctx.events.emit(
                        "failed-mount", **self._who(), reason="FailedMount", message=reported
                    )
                self._changed()
            await self._pause(1.0)

    def _sync_volumes(self) -> None:
        """Make the pod's volume directories and write its files as the container
        sees them (substituted: paths, cluster names, ``0.0.0.0``) — only when that
        differs from what was written last, so an unchanged pod costs no disk access.
        A missing ConfigMap, Secret or claim is a :class:`podenv.ConfigError`."""
        spec = self.pod.get("spec") or {}
        inputs = self.ctx.inputs
        cms, secrets = inputs.configmaps(self.namespace), inputs.secrets(self.namespace)
        plan: list[tuple[Path, volumes.Files | None]] = []
        for vol in spec.get("volumes") or []:
            claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
            if claim and not inputs.claim_exists(self.namespace, claim):
                raise podenv.ConfigError(f'persistentvolumeclaim "{claim}" not found')
            target = volumes.host_dir(
                vol, root=self.ctx.root, pod_dir=self.dir, namespace=self.namespace
            )
            files = volumes.volume_files(
                vol,
                pod=self.pod,
                configmaps=cms,
                secrets=secrets,
                pod_ip=self.ip,
                node=self.ctx.node_name,
                token=self._token,
            )
            plan.append((target, files))
        if spec.get("automountServiceAccountToken", True):
            plan.append((self.sa_dir, volumes.serviceaccount_files(self.namespace, self._token)))
        subst = self.launch.substitution(None)
        wanted = [
            (
                target,
                None
                if files is None
                else {rel: subst.apply_bytes(c) if s else c for rel, (c, s) in files.items()},
            )
            for target, files in plan
        ]
        if wanted == self._files:
            return
        for target, content in wanted:
            if content is None:
                target.mkdir(parents=True, exist_ok=True)
            else:
                volumes.write_files(target, content)
        if self.ctx.images is not None:  # the container's user must be able to write
            group = imagerun.fs_group(self.pod)
            for vol, (target, _) in zip(spec.get("volumes") or [], plan, strict=False):
                volumes.open_to_pod(vol, target, group)
        self._files = wanted

    async def _run_init(self) -> None:
        for spec, state in zip(self.init_specs, self.init, strict=True):
            code = await self._supervise(spec, state, init=True)
            if code != 0:
                self.init_failed = not self.deleting.is_set()
                self._changed()
                return
        self.initialized = True
        for state in self.containers:
            state.reason = "ContainerCreating"
        self._changed()

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.deleting.wait(), seconds)

    async def _supervise(
        self, spec: Mapping[str, Any], state: ContainerState, *, init: bool
    ) -> int:
        """Run one container until it should stay stopped; its last exit code."""
        policy = (self.pod.get("spec") or {}).get("restartPolicy", "Always")
        if init and policy == "Always":
            policy = "OnFailure"  # init containers are never restarted after success
        backoff, code = BACKOFF_START_S, -1
        while not self.deleting.is_set():
            try:
                argv, env, cwd = await self.launch.argv(spec)
                log_dir = self.ctx.root / "logs" / self.namespace
                log_dir.mkdir(parents=True, exist_ok=True)
                with (log_dir / f"{self.name}_{spec['name']}.log").open("ab") as log:
                    proc = await asyncio.create_subprocess_exec(
                        *dying_with_parent(argv, env, cwd),
                        env=env,
                        cwd=cwd,
                        stdin=asyncio.subprocess.DEVNULL,
                        stdout=log,
                        stderr=asyncio.subprocess.STDOUT,
                        start_new_session=True,
                    )
            except (podenv.ConfigError, OSError) as exc:
                reason = exc.reason if isinstance(exc, podenv.ConfigError) else "RunContainerError"
                state.state, state.reason, state.message = "waiting", reason, str(exc)
                self._changed()
                await self._pause(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            self.ctx.ledger.add(record(proc.pid, f"{self.namespace}/{self.name}/{spec['name']}"))
            self.procs[spec["name"]] = proc
            if self.deleting.is_set():  # deleted while it was starting: it does not run
                killpg(proc.pid, signal.SIGKILL)
            began = time.monotonic()
            state.state, state.reason, state.message = "running", "", ""
            state.started_at, state.pid = now_rfc3339(), proc.pid
            state.exit_code, state.signal = None, None
            state.started = "startupProbe" not in spec
            state.ready = state.started and "readinessProbe" not in spec and not init
            self.ctx.events.emit(
                "container-started",
                **self._who(),
                container=spec["name"],
                pid=proc.pid,
                image=spec.get("image", ""),
                restartCount=state.restart_count,
            )
            self._changed()
            probing = None if init else asyncio.ensure_future(self._probe_loop(spec, state, proc))
            returncode = await proc.wait()
            if probing is not None:
                probing.cancel()
            killpg(proc.pid, signal.SIGKILL)  # the container goes as a whole
            code = returncode if returncode >= 0 else 128 - returncode
            state.state, state.ready, state.finished_at = "terminated", False, now_rfc3339()
            state.exit_code, state.signal = code, (-returncode if returncode < 0 else None)
            state.reason = "Completed" if code == 0 else "Error"
            self.ctx.events.emit(
                "container-exited",
                **self._who(),
                container=spec["name"],
                pid=proc.pid,
                exitCode=code,
                signal=state.signal,
            )
            self._changed()
            restart = policy == "Always" or (policy == "OnFailure" and code != 0)
            if self.deleting.is_set() or not restart:
                return code
            if time.monotonic() - began >= BACKOFF_RESET_S:
                backoff = BACKOFF_START_S
            state.last_state = state.terminated_state()
            state.state, state.reason = "waiting", "CrashLoopBackOff"
            state.message = f"back-off {backoff:.0f}s restarting failed container"
            self._changed()
            await self._pause(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)
            if not self.deleting.is_set():
                state.restart_count += 1
        return code

    async def _probe_loop(
        self, spec: Mapping[str, Any], state: ContainerState, proc: asyncio.subprocess.Process
    ) -> None:
        ports = {
            p["name"]: int(p["containerPort"]) for p in spec.get("ports") or [] if p.get("name")
        }
        cap = self.ctx.probe_period_cap

        async def check(probe: Mapping[str, Any], limit_s: float) -> bool:
            argv = None
            env: dict[str, str] = {}
            cwd = str(self.dir)
            if "exec" in probe:
                try:
                    command = list(probe["exec"].get("command") or [])
                    if not command:
                        return False
                    argv, env, cwd = await self.launch.argv(spec, command)
                except (podenv.ConfigError, OSError):
                    return False
            return await probes.probe_once(
                probe,
                pod_ip=self.ip,
                ports=ports,
                argv=argv,
                env=env,
                cwd=cwd,
                http=self.ctx.http,
                limit_s=limit_s,
            )

        startup = spec.get("startupProbe")
        if startup:
            sched = probes.ProbeSchedule(startup, initial=False, period_cap=cap)
            await asyncio.sleep(sched.delay)
            while not sched.result:
                if self.deleting.is_set():  # kubelet stops startup probes on deletion
                    return
                sched.record(await check(startup, sched.timeout))
                if sched.failed:
                    await self._stop([proc], self._grace())  # as on deletion
                    return
                if not sched.result:
                    await asyncio.sleep(sched.period)
            state.started = True
            state.ready = "readinessProbe" not in spec
            self._changed()
        readiness, liveness = spec.get("readinessProbe"), spec.get("livenessProbe")
        loops = []
        if readiness:
            loops.append(self._probe_kind(readiness, False, cap, check, state, proc, "readiness"))
        if liveness:
            loops.append(self._probe_kind(liveness, True, cap, check, state, proc, "liveness"))
        await asyncio.gather(*loops)

    async def _probe_kind(
        self,
        probe: Mapping[str, Any],
        initial: bool,
        cap: float | None,
        check: Callable[[Mapping[str, Any], float], Awaitable[bool]],
        state: ContainerState,
        proc: asyncio.subprocess.Process,
        kind: str,
    ) -> None:
        sched = probes.ProbeSchedule(probe, initial=initial, period_cap=cap)
        await asyncio.sleep(sched.delay)
        while proc.returncode is None:
            if kind == "liveness" and self.deleting.is_set():
                return  # kubelet stops liveness probes on deletion: no restart mid-shutdown
            flipped = sched.record(await check(probe, sched.timeout))
            if flipped and kind == "readiness":
                state.ready = sched.result
                self._changed()
            if kind == "liveness" and sched.failed and not self.deleting.is_set():
                await self._stop([proc], self._grace())  # as on deletion
                return
            await asyncio.sleep(sched.period)

    async def _stop(self, procs: list[asyncio.subprocess.Process], grace: float) -> None:
        """Stop containers as kubelet does — on deletion, on shutdown, on a failed
        liveness or startup probe: SIGTERM to each running one's process group,
        SIGKILL to every group after ``grace`` seconds (what a container left behind
        goes too), then wait for the containers to be reaped."""
        running = [p for p in procs if p.returncode is None]
        for proc in running:
            self.launch.terminate(proc.pid)
        if running:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(p.wait() for p in running)), grace)
        for proc in procs:
            killpg(proc.pid, signal.SIGKILL)
        for proc in running:
            await proc.wait()

    async def _status_loop(self) -> None:
        """Report the pod's status whenever something changed (coalesced)."""
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            status = pod_status(
                self.pod,
                init=self.init,
                containers=self.containers,
                initialized=self.initialized,
                init_failed=self.init_failed,
                pod_ip=self.ip,
                start_time=self.start_time,
                now=now_rfc3339(),
            )
            ready = (
                not self.deleting.is_set()
                and all(c.ready for c in self.containers)
                and bool(self.containers)
            )
            if ready != self._ready:
                self._ready = ready
                self.ctx.events.emit("ready" if ready else "not-ready", **self._who())
            if self.gone.is_set():
                return
            try:
                await self.ctx.report(self.pod, status)
            except Exception as exc:  # the next change reports again
                log.warning("status of %s/%s not reported: %r", self.namespace, self.name, exc)
                await asyncio.sleep(0.5)
                self._dirty.set()
