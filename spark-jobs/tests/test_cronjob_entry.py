"""The CronJob the operator renders calls this package's real entry point: its file
path, its arguments and its --config document are the ones run.py and config.py take."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rocketcluster.api.cluster import SPARK_DRIVER_JVM_OPTIONS, RocketCluster
from rocketcluster.jobs import run
from rocketcluster.jobs.config import parse_config
from rocketcluster.operator.render import health_reports

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "health-reports.yaml"


def _cluster() -> RocketCluster:
    return RocketCluster.model_validate(yaml.safe_load(EXAMPLE.read_text()))


def _container(cluster: RocketCluster) -> dict[str, Any]:
    (job,) = [o for o in health_reports.render(cluster) if o["kind"] == "CronJob"]
    (container,) = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_the_cron_job_runs_run_py_with_arguments_it_accepts() -> None:
    cluster = _cluster()
    container = _container(cluster)
    args = container["args"]
    assert container["command"] == ["spark-submit"]
    entry = args.index(health_reports.ENTRY_POINT)
    assert args[entry - 10 : entry] == [
        "--master", "local[2]", "--driver-memory", args[entry - 7], "--conf",
        "spark.ui.enabled=false", "--driver-java-options",
        f"-Dlog4j2.configurationFile=file:{health_reports.LOG_CONFIG} "
        + " ".join(SPARK_DRIVER_JVM_OPTIONS), "--name", args[entry - 1],
    ]  # fmt: skip
    # The paths inside the image are this very package's files, below site-packages.
    package = Path(run.__file__).parent
    assert package.parts[-2:] == ("rocketcluster", "jobs")
    for path in (health_reports.ENTRY_POINT, health_reports.LOG_CONFIG):
        assert path.startswith(
            "/opt/rocketcluster/lib/python3.11/site-packages/rocketcluster/jobs/"
        )
        assert (package / Path(path).name).is_file(), path

    parsed = run.parse_args(args[entry + 1 :])
    assert parsed.master == "none" and parsed.cluster == cluster.name
    assert len(parsed.controller) == 3 and all(u.endswith(":8080") for u in parsed.controller)
    assert parsed.out == Path(health_reports.REPORTS_DIR)
    assert parsed.config is not None
    reports = cluster.spec.health_reports
    assert reports is not None
    assert parsed.jobs.split(",") == list(reports.jobs)
    assert parsed.history_hours == reports.history_hours

    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert env["PYSPARK_PYTHON"] == health_reports.IMAGE_PYTHON


def test_the_rendered_price_table_is_a_config_the_jobs_read() -> None:
    cluster = _cluster()
    document = health_reports.config_document(cluster)
    assert document is not None
    config = parse_config(yaml.safe_load(document), source=Path(health_reports.CONFIG_FILE))
    prices = cluster.spec.health_reports.prices if cluster.spec.health_reports else None
    assert prices is not None
    assert config.prices.local_gb_month == prices.local_gb_month
    assert config.prices.object_gb_month == prices.object_gb_month
