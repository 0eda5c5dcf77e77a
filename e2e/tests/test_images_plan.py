"""The image builder's pure part: what it builds, with which tags, build arguments,
labels and cache keys, and how requirements become a build context — plus the
Containerfiles agreeing with the catalogue and with the pods the operator renders."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rocketcluster.api.cluster import RocketCluster, load_manifest
from rocketcluster.e2e.images import cache, tools
from rocketcluster.e2e.images.buildah import parse_inspect, run_argv
from rocketcluster.e2e.images.catalogue import (
    BASE,
    BASE_JRE,
    IMAGES,
    PYTHON_VERSION,
    RUN_AS,
    ImageSpec,
    UnknownImage,
    select,
)
from rocketcluster.e2e.images.plan import (
    MissingWheels,
    Pin,
    RequirementsError,
    Settings,
    Workspace,
    WorkspaceError,
    archive_target,
    base_key,
    bases_needed,
    bud_args,
    build_key,
    license_expression,
    merge_pins,
    mmdebstrap_argv,
    parse_pins,
    pip_download_args,
    plan_images,
    platform_tags,
    push_args,
    render_requirements,
    select_wheels,
    validate_registry,
    wheel_name_version,
    wheelhouse_key,
    workspace_version,
)
from rocketcluster.operator.render import health_reports, pods, render_cluster

ROOT = Path(__file__).resolve().parents[2]
WORKSPACE = Workspace(root=ROOT, version="1.2.3", revision="abc123", licenses="NOASSERTION")


# --- what to build -------------------------------------------------------------------


def test_all_five_deployables_by_default_and_a_selection_in_catalogue_order() -> None:
    assert [s.name for s in select(None)] == [
        "broker",
        "controller",
        "operator",
        "console",
        "spark-jobs",
    ]
    assert [s.name for s in select(["spark-jobs", "broker"])] == ["broker", "spark-jobs"]


def test_an_unknown_image_names_the_choices() -> None:
    choices = r"broker, controller, operator, console, spark-jobs"
    with pytest.raises(UnknownImage, match=rf"'brokers'.*{choices}"):
        select(["brokers"])


def test_each_image_is_tagged_with_the_workspace_version_on_its_base() -> None:
    plans = {p.spec.name: p for p in plan_images(IMAGES, WORKSPACE, Settings())}
    broker = plans["broker"]
    assert broker.tag == "localhost/rocketcluster-broker:1.2.3"
    assert broker.build_args == {
        "BASE": "localhost/rocketcluster-base:bookworm",
        "VERSION": "1.2.3",
        "REVISION": "abc123",
        "LICENSES": "NOASSERTION",
    }
    assert broker.pull_never and broker.local_base is BASE
    assert broker.registry_tag is None and broker.archive is None and not broker.push
    spark = plans["spark-jobs"]
    assert spark.base_image == "localhost/rocketcluster-base-jre:bookworm"
    assert spark.local_base is BASE_JRE
    assert bases_needed(plans.values()) == [BASE, BASE_JRE]
    assert bases_needed([broker]) == [BASE]


def test_the_labels_carry_version_revision_source_and_licence() -> None:
    (plan,) = plan_images(select(["controller"]), WORKSPACE, Settings())
    assert plan.labels == {
        "org.opencontainers.image.title": "rocketcluster-controller",
        "org.opencontainers.image.source": "https://github.com/rocketcluster/rocketcluster",
        "org.opencontainers.image.version": "1.2.3",
        "org.opencontainers.image.revision": "abc123",
        "org.opencontainers.image.licenses": "NOASSERTION",
    }


def test_a_registry_adds_a_tag_and_push_needs_one(tmp_path: Path) -> None:
    settings = Settings(registry="ghcr.io/acme/", push=True, out=tmp_path)
    (plan,) = plan_images(select(["operator"]), WORKSPACE, settings)
    assert plan.registry_tag == "ghcr.io/acme/rocketcluster-operator:1.2.3" and plan.push
    assert plan.archive == tmp_path / "rocketcluster-operator-1.2.3.oci.tar"
    assert archive_target(plan) == f"oci-archive:{plan.archive}:{plan.registry_tag}"
    with pytest.raises(ValueError, match="--push needs --registry"):
        Settings(push=True)


def test_an_archive_without_a_registry_is_named_after_the_local_tag(tmp_path: Path) -> None:
    (plan,) = plan_images(select(["broker"]), WORKSPACE, Settings(out=tmp_path))
    assert archive_target(plan).endswith(":localhost/rocketcluster-broker:1.2.3")
    (unarchived,) = plan_images(select(["broker"]), WORKSPACE, Settings())
    with pytest.raises(ValueError, match="no archive directory"):
        archive_target(unarchived)


def test_a_registry_on_this_machine_is_pushed_to_without_tls() -> None:
    local, remote = (
        plan_images(select(["broker"]), WORKSPACE, Settings(registry=r, push=True))[0]
        for r in ("127.0.0.1:5000/test", "ghcr.io/acme")
    )
    assert push_args(local) == [
        "push",
        "--quiet",
        "--tls-verify=false",
        "127.0.0.1:5000/test/rocketcluster-broker:1.2.3",
        "docker://127.0.0.1:5000/test/rocketcluster-broker:1.2.3",
    ]
    assert "--tls-verify=false" not in push_args(remote)
    (unregistered,) = plan_images(select(["broker"]), WORKSPACE, Settings())
    with pytest.raises(ValueError, match="no registry"):
        push_args(unregistered)


@pytest.mark.parametrize(
    "registry", ["ghcr.io/acme", "localhost:5000", "registry.example.com:443/team/sub-team"]
)
def test_registries_that_make_valid_references(registry: str) -> None:
    assert validate_registry(registry + "/") == registry


@pytest.mark.parametrize(
    ("registry", "why"),
    [
        ("https://ghcr.io/acme", "without a scheme"),
        ("ghcr.io/Acme", "lower case"),
        ("ghcr.io//acme", "lower case"),
        ("", "lower case"),
    ],
)
def test_registries_refused_with_the_reason(registry: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        validate_registry(registry)


def test_a_given_base_replaces_the_debian_one_and_may_be_pulled() -> None:
    settings = Settings(base="python:3.11-slim-bookworm", jre_base="eclipse-temurin:17")
    plans = {p.spec.name: p for p in plan_images(IMAGES, WORKSPACE, settings)}
    assert plans["broker"].build_args["BASE"] == "python:3.11-slim-bookworm"
    assert plans["spark-jobs"].build_args["BASE"] == "eclipse-temurin:17"
    assert not plans["broker"].pull_never and plans["broker"].local_base is None
    assert bases_needed(plans.values()) == []
    assert "--pull" in bud_args(plans["broker"], "C", "ctx", "k")


def test_bud_arguments_build_offline_from_the_plan() -> None:
    (plan,) = plan_images(select(["broker"]), WORKSPACE, Settings())
    args = bud_args(plan, "/r/images/broker/Containerfile", "/ctx", "KEY")
    assert args[:5] == ["bud", "--isolation", "chroot", "--layers=false", "--pull-never"]
    assert args[-3:] == ["-f", "/r/images/broker/Containerfile", "/ctx"]
    pairs = {args[i + 1] for i, a in enumerate(args) if a == "--build-arg"}
    assert pairs == {f"{k}={v}" for k, v in plan.build_args.items()}
    assert "io.rocketcluster.build-key=KEY" in args
    assert args[args.index("-t") + 1] == plan.tag


# --- cache keys ------------------------------------------------------------------------


def test_the_base_key_follows_the_recipe() -> None:
    assert base_key(BASE) == base_key(BASE)
    assert base_key(BASE) != base_key(BASE_JRE)
    argv = mmdebstrap_argv(BASE_JRE, "/out.tar")
    assert "--include=python3,python3-venv,ca-certificates,openjdk-17-jre-headless" in argv
    assert argv[-2:] == ["bookworm", "/out.tar"]


def test_the_wheelhouse_key_follows_the_lock_file() -> None:
    assert wheelhouse_key("a") == wheelhouse_key("a") != wheelhouse_key("b")


def test_the_build_key_changes_with_every_input() -> None:
    base = build_key("FROM x", {"VERSION": "1"}, {"wheels/a.whl": "d1"}, "base1")
    assert base == build_key("FROM x", {"VERSION": "1"}, {"wheels/a.whl": "d1"}, "base1")
    for changed in (
        build_key("FROM y", {"VERSION": "1"}, {"wheels/a.whl": "d1"}, "base1"),
        build_key("FROM x", {"VERSION": "2"}, {"wheels/a.whl": "d1"}, "base1"),
        build_key("FROM x", {"VERSION": "1"}, {"wheels/a.whl": "d2"}, "base1"),
        build_key("FROM x", {"VERSION": "1"}, {"wheels/a.whl": "d1"}, "base2"),
    ):
        assert changed != base


# --- requirements and the wheelhouse ---------------------------------------------------


def test_platform_tags_cover_every_manylinux_the_base_runs_and_none_newer() -> None:
    tags = platform_tags((2, 36), "x86_64")
    assert tags[0] == "manylinux_2_36_x86_64"
    for tag in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"):
        assert tag in tags
    assert "manylinux_2_37_x86_64" not in tags
    args = pip_download_args("req.txt", "/pool")
    assert {"--only-binary=:all:", "--no-deps"} <= set(args)
    assert args[args.index("--python-version") + 1] == "3.11"
    assert args.count("--platform") == len(platform_tags())
    assert args[-4:] == ["-r", "req.txt", "-d", "/pool"]


def test_pins_are_read_exactly_and_anything_looser_is_refused() -> None:
    text = (
        "# header\n-e ./api\nTyping_Extensions==4.16.0\n"
        "colorama==0.4.6 ; sys_platform == 'win32'\npyspark[sql]==4.3.0  # via x\n\n"
    )
    assert parse_pins(text, "r.txt") == [
        Pin("typing-extensions", "4.16.0"),
        Pin("colorama", "0.4.6", "sys_platform == 'win32'"),
        Pin("pyspark", "4.3.0"),
    ]
    with pytest.raises(RequirementsError, match=r"r\.txt:2: 'httpx>=0\.27' is not an exact pin"):
        parse_pins("a==1\nhttpx>=0.27\n", "r.txt")


def test_pins_merge_into_one_sorted_list_and_conflicts_say_what_to_do() -> None:
    merged = merge_pins([Pin("b", "1"), Pin("a", "2")], [Pin("b", "1")])
    assert merged == [Pin("a", "2"), Pin("b", "1")]
    assert render_requirements(merged) == "a==2\nb==1\n"
    with pytest.raises(RequirementsError, match=r"pinned to both 1 and 2.*one uv\.lock"):
        merge_pins([Pin("b", "1")], [Pin("b", "2")])


def test_wheels_are_chosen_by_normalized_name_and_exact_version() -> None:
    files = [
        "typing_extensions-4.16.0-py3-none-any.whl",
        "typing_extensions-4.15.0-py3-none-any.whl",
        "grpcio-1.85.1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "requirements.txt",
    ]
    pins = [Pin("typing-extensions", "4.16.0"), Pin("grpcio", "1.85.1")]
    assert select_wheels(pins, files) == [files[0], files[2]]
    assert wheel_name_version(files[2]) == ("grpcio", "1.85.1")
    with pytest.raises(RequirementsError, match="not a wheel file name"):
        wheel_name_version("grpcio-1.85.1.tar.gz")


def test_a_pin_without_a_wheel_is_an_error_unless_its_marker_excluded_it() -> None:
    pins = [Pin("lmdb", "3.0.0"), Pin("colorama", "0.4.6", "sys_platform == 'win32'")]
    with pytest.raises(MissingWheels, match=r"lmdb==3\.0\.0$"):
        select_wheels(pins, [])
    assert select_wheels(pins[1:], []) == []


# --- the workspace ---------------------------------------------------------------------


def test_images_carry_the_one_version_every_member_has() -> None:
    assert workspace_version({"a": "0.1.0", "b": "0.1.0"}) == "0.1.0"
    with pytest.raises(WorkspaceError, match=r"a 0\.1\.0, b 0\.2\.0.*make them equal"):
        workspace_version({"b": "0.2.0", "a": "0.1.0"})


def test_the_licence_is_the_declared_one_or_no_assertion() -> None:
    assert license_expression({"license": "Apache-2.0"}) == "Apache-2.0"
    assert license_expression({"license": {"text": "MIT"}}) == "MIT"
    assert license_expression({}) == "NOASSERTION"


# --- buildah's answers and commands --------------------------------------------------


def test_an_image_is_read_from_buildah_inspect() -> None:
    data = {
        "FromImageID": "abc",
        "Manifest": json.dumps({"layers": [{"size": 100}, {"size": 23}]}),
        "OCIv1": {
            "config": {
                "User": "10001:10001",
                "Env": ["PATH=/opt/rocketcluster/bin:/usr/bin", "HOME=/tmp"],
                "Entrypoint": ["rocketcluster-broker"],
                "Cmd": ["--config", "/etc/rocketcluster/broker.json"],
                "Labels": {"org.opencontainers.image.version": "0.1.0"},
            }
        },
    }
    info = parse_inspect(data)
    assert (info.id, info.size, info.user) == ("abc", 123, "10001:10001")
    assert info.env == {"PATH": "/opt/rocketcluster/bin:/usr/bin", "HOME": "/tmp"}
    assert info.entrypoint == ["rocketcluster-broker"] and info.cmd[0] == "--config"
    assert info.labels["org.opencontainers.image.version"] == "0.1.0"


def test_a_run_command_line_mounts_sets_and_separates_the_command() -> None:
    argv = run_argv(
        "c1",
        ["rocketctl", "--help"],
        user="10001:10001",
        volumes=[("/h/cfg", "/etc/rocketcluster", True), ("/h/data", "/var/lib/x", False)],
        env={"A": "1"},
    )
    tail = argv[argv.index("run") :]
    assert tail[:5] == ["run", "--isolation", "chroot", "--network", "host"]
    assert "/h/cfg:/etc/rocketcluster:ro" in tail and "/h/data:/var/lib/x:rw" in tail
    assert tail[tail.index("--env") + 1] == "A=1"
    assert tail[-4:] == ["c1", "--", "rocketctl", "--help"]


# --- the Containerfiles agree with the catalogue and the operator -------------------


def containerfile(name: str) -> str:
    return (ROOT / "images" / name / "Containerfile").read_text()


def label(text: str, key: str) -> str:
    match = re.search(rf'org\.opencontainers\.image\.{key}="([^"]*)"', text)
    assert match is not None, key
    return match[1]


@pytest.mark.parametrize("spec", IMAGES, ids=lambda s: s.name)
def test_each_containerfile_matches_its_catalogue_entry(spec: ImageSpec) -> None:
    text = containerfile(spec.name)
    assert f"ARG BASE={spec.base.tag}\n" in text
    assert label(text, "title") == spec.title
    assert label(text, "version") == "${VERSION}" and label(text, "revision") == "${REVISION}"
    assert label(text, "source").startswith("https://")
    assert label(text, "description")
    assert f"USER {RUN_AS}:{RUN_AS}\n" in text and RUN_AS == pods.RUN_AS
    for dist in spec.project:  # every workspace wheel it installs, at the version built
        assert f'"{dist}==${{VERSION}}"' in text


def test_broker_controller_and_console_images_start_what_the_operator_s_pods_run() -> None:
    data = load_manifest(ROOT / "examples" / "cluster.yaml").model_dump(by_alias=True)
    data["spec"]["console"] = {"enabled": True}
    cluster = RocketCluster.model_validate(data)
    commands = {
        c["name"]: c["command"][0]
        for obj in render_cluster(cluster)
        if obj["kind"] in ("StatefulSet", "Deployment")
        for c in obj["spec"]["template"]["spec"]["containers"]
    }
    assert commands == {
        "broker": "rocketcluster-broker",
        "controller": "rocketcluster-controller",
        "console": "rocketcluster-console",
    }
    for name, command in commands.items():
        assert f'ENTRYPOINT ["{command}"]' in containerfile(name)
    assert 'ENTRYPOINT ["rocketcluster-operator"]' in containerfile("operator")


def test_the_spark_image_installs_the_jobs_and_runs_what_the_cron_job_names() -> None:
    """The image holds rocketcluster-jobs with its locked dependencies (PySpark among
    them), and the paths the operator's CronJob uses are the image's: spark-submit on
    PATH, the entry point's file and the Python the workers run on."""
    (spec,) = select(["spark-jobs"])
    assert spec.lock_packages == ("rocketcluster-jobs",)
    assert "rocketcluster-jobs" in spec.project
    text = containerfile("spark-jobs")
    assert f"ROCKETCLUSTER_JOBS_RUN={health_reports.ENTRY_POINT}" in text
    assert f"PYSPARK_PYTHON={health_reports.IMAGE_PYTHON}" in text
    assert "PATH=/opt/rocketcluster/bin:" in text
    assert f"python{PYTHON_VERSION}/site-packages/" in health_reports.ENTRY_POINT
    cluster = load_manifest(ROOT / "examples" / "health-reports.yaml")
    (cron_job,) = [o for o in render_cluster(cluster) if o["kind"] == "CronJob"]
    (container,) = cron_job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["spark-submit"]
    assert health_reports.ENTRY_POINT in container["args"]
    # The entry point is where the installed package puts it.
    source = ROOT / "spark-jobs" / "src" / "rocketcluster" / "jobs" / "run.py"
    assert source.is_file(), "the CronJob runs rocketcluster/jobs/run.py"


def test_pip_is_found_from_inside_a_virtualenv_that_has_none(tmp_path: Path) -> None:
    """``make images`` runs the builder under ``uv run``: its interpreter and python3
    on PATH are a virtualenv's without pip, and pip must still be found (the
    interpreter the virtualenv was made from has it)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    script = "from rocketcluster.e2e.images import tools; print(tools.pip()[0])"
    env = {
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(Path(tools.__file__).resolve().parents[3]),
    }
    found = subprocess.run(
        [str(venv / "bin" / "python"), "-c", script],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert not found.startswith(str(venv))
    has_pip = subprocess.run([found, "-m", "pip", "--version"], capture_output=True, check=False)
    assert has_pip.returncode == 0


def test_a_cache_entry_is_published_whole_and_abandoned_temporaries_go(tmp_path: Path) -> None:
    parent = tmp_path / "built"
    left = parent / ".pyspark-4.3.0.99999.tmp"  # a build that was killed
    left.mkdir(parents=True)
    (left / "half.whl").write_bytes(b"")
    tmp = cache.staging(parent, "pyspark-4.3.0")
    assert not left.exists() and list(tmp.iterdir()) == []
    (tmp / "pyspark-4.3.0-py2.py3-none-any.whl").write_bytes(b"wheel")
    assert not cache.entry(parent, "pyspark-4.3.0").exists()  # nothing half-made is used
    final = cache.publish(tmp, parent, "pyspark-4.3.0")
    assert [p.name for p in final.iterdir()] == ["pyspark-4.3.0-py2.py3-none-any.whl"]
    (parent / "pyspark-4.2.0").mkdir()
    assert cache.prune(parent, keep="pyspark-4.3.0") == ["pyspark-4.2.0"]
