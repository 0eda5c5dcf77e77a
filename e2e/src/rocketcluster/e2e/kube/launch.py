"""How one pod instance's containers are started on this node, in either mode: the
command line, the environment and the mounts a container gets, and how it is asked
to stop. Process mode: a host process whose text is rewritten to host paths.
Image mode (:mod:`imagerun`): ``buildah run`` in the image's working container."""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from rocketcluster.api import kube as contract
from rocketcluster.e2e.kube import firewall, imagerun, podenv, volumes
from rocketcluster.e2e.kube.imagerun import Mount
from rocketcluster.e2e.kube.node import NodeContext
from rocketcluster.e2e.kube.processes import killpg
from rocketcluster.e2e.kube.substitute import Substitution


def _executable(name: str, path: str) -> str:
    if os.path.isabs(name) and os.access(name, os.X_OK):
        return name
    found = shutil.which(os.path.basename(name), path=path)
    if found is None:
        raise FileNotFoundError(f"executable {name!r} not found on PATH ({path})")
    return found


class Launcher:
    """One pod instance's way of starting its containers (a pod's processes need its
    volumes, its address and its names; the worker only supervises them)."""

    def __init__(
        self,
        ctx: NodeContext,
        pod: Callable[[], Mapping[str, Any]],
        ip: str,
        directory: Path,
        sa_dir: Path,
    ) -> None:
        self.ctx = ctx
        self.pod = pod  # the pod object as last seen (its labels may change)
        self.ip = ip
        self.dir = directory
        self.sa_dir = sa_dir
        meta = pod()["metadata"]
        self.namespace, self.name = meta["namespace"], meta["name"]
        spec = pod().get("spec") or {}
        self.init_specs = list(spec.get("initContainers") or [])
        self.specs = list(spec.get("containers") or [])

    def volume_mounts(self, spec: Mapping[str, Any] | None) -> list[Mount]:
        """The volumes of one container, or of all of them: host path, mountPath and
        whether the container may write (ConfigMaps, Secrets… never)."""
        pod_spec = self.pod().get("spec") or {}
        by_name = {v["name"]: v for v in pod_spec.get("volumes") or []}
        specs = [spec] if spec is not None else [*self.init_specs, *self.specs]
        out: list[Mount] = []
        for container in specs:
            for mount in container.get("volumeMounts") or []:
                vol = by_name.get(mount["name"])
                if vol is None:
                    continue
                base = volumes.host_dir(
                    vol, root=self.ctx.root, pod_dir=self.dir, namespace=self.namespace
                )
                path = base / mount["subPath"] if mount.get("subPath") else base
                read_only = bool(mount.get("readOnly")) or volumes.read_only(vol)
                out.append(Mount(str(path), mount["mountPath"], read_only))
        if pod_spec.get("automountServiceAccountToken", True):
            out.append(Mount(str(self.sa_dir), contract.SERVICEACCOUNT_DIR, True))
        return out

    def mounts(self, spec: Mapping[str, Any] | None) -> list[tuple[str, str]]:
        """(mountPath, host path) of one container, or of all of them."""
        return [(m.path, m.host) for m in self.volume_mounts(spec)]

    def substitution(self, spec: Mapping[str, Any] | None) -> Substitution:
        """In image mode the volumes are where the container looks: paths stay."""
        mounts = () if self.ctx.images is not None else tuple(self.mounts(spec))
        return Substitution(mounts, self.ip, self.ctx.inputs.resolve)

    def base_env(self) -> dict[str, str]:
        """What every container's environment starts from. A host process gets the
        host's PATH and a home and temporary directory of its own; a container in
        image mode has its image's environment, and its service-account files where
        Kubernetes puts them."""
        api = httpx.URL(self.ctx.api_url)
        spec = self.pod().get("spec") or {}
        env = {"HOSTNAME": spec.get("hostname") or self.name}
        if self.ctx.images is None:
            env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
            env["HOME"], env["TMPDIR"] = str(self.dir / "home"), str(self.dir / "tmp")
            env.update({k: os.environ[k] for k in ("LANG", "LC_ALL", "TZ") if k in os.environ})
            env[contract.ENV_SERVICEACCOUNT_DIR] = str(self.sa_dir)
        if spec.get("enableServiceLinks", True):
            env.update(podenv.service_links(self.ctx.inputs.services(self.namespace)))
        env.update(
            {
                "KUBERNETES_SERVICE_HOST": api.host,
                "KUBERNETES_SERVICE_PORT": str(api.port or 80),
                contract.ENV_KUBE_API_URL: self.ctx.api_url,
            }
        )
        return env

    def container_env(self, spec: Mapping[str, Any]) -> dict[str, str]:
        base = self.base_env()
        env = podenv.container_env(
            self.pod(),
            spec,
            configmaps=self.ctx.inputs.configmaps(self.namespace),
            secrets=self.ctx.inputs.secrets(self.namespace),
            pod_ip=self.ip,
            node=self.ctx.node_name,
            base=base,
        )
        subst = self.substitution(spec)
        env = {k: (v if base.get(k) == v else subst.apply(v)) for k, v in env.items()}
        source = self.ctx.host_sources.get(str(spec.get("image", "")))
        if source is not None and self.ctx.images is None:
            env["PYTHONPATH"] = os.pathsep.join(str(d) for d in sorted(source.glob("*/src")))
        return env

    def command(self, spec: Mapping[str, Any]) -> tuple[list[str], dict[str, str], str]:
        """A host process's argv, environment and working directory."""
        env = self.container_env(spec)
        subst = self.substitution(spec)
        argv = [subst.apply(a) for a in podenv.command_line(spec, env)]
        argv[0] = _executable(argv[0], env["PATH"])
        cwd = subst.apply(spec["workingDir"]) if spec.get("workingDir") else str(self.dir / "home")
        for d in (self.dir / "home", self.dir / "tmp", Path(cwd)):
            d.mkdir(parents=True, exist_ok=True)
        return argv, env, cwd

    async def argv(
        self, spec: Mapping[str, Any], command: list[str] | None = None
    ) -> tuple[list[str], dict[str, str], str]:
        """argv, environment and working directory of the container (or of
        ``command`` run in it: an exec probe), in the node's mode."""
        images = self.ctx.images
        if images is None:
            argv, env, cwd = self.command(spec)
            if command is not None:
                subst = self.substitution(spec)
                argv = [subst.apply(a) for a in command]
                if argv:
                    argv[0] = _executable(argv[0], env["PATH"])
            return await self._in_cgroup(argv, env), env, cwd
        container = await images.container(str(spec.get("image", "")))
        env = self.container_env(spec)
        subst = self.substitution(spec)
        inner = (
            command if command is not None else imagerun.image_command(spec, container.image, env)
        )
        argv = images.argv(
            container,
            [subst.apply(a) for a in inner],
            env=env,
            mounts=self.volume_mounts(spec),
            user=imagerun.run_as(self.pod(), spec),
            workdir=spec.get("workingDir"),
        )
        self.dir.mkdir(parents=True, exist_ok=True)
        return argv, dict(os.environ), str(self.dir)  # buildah's own environment

    async def _in_cgroup(self, argv: list[str], env: Mapping[str, str]) -> list[str]:
        """With NetworkPolicies enforced, ``argv`` joins the pod's cgroup before it
        execs: its connections then leave from the pod's address (firewall.py)."""
        if self.ctx.cgroup_for is None or not argv:
            return argv
        procs = await self.ctx.cgroup_for(str(self.pod()["metadata"]["uid"]), self.ip)
        if procs is None:
            return argv
        return firewall.join_argv(procs, argv, sh=_executable("sh", env["PATH"]))

    def terminate(self, pid: int) -> None:
        """SIGTERM a container: its process group; in image mode the container's own
        processes (``buildah run`` would SIGKILL them on SIGTERM)."""
        images = self.ctx.images
        if images is None or not images.terminate(pid):
            killpg(pid, signal.SIGTERM)
