"""The launcher of Spark's containers on Kubernetes (rocketcluster.jobs.k8s_executor):
the executor's command line from the environment Spark sets on its pods, and — for
real — an executor started by it joining a Spark driver and running a PySpark job.

The real test needs no Kubernetes: a driver against a standalone Master with no
Workers (so no executor of Spark's own), and the launcher started as a process with
the environment an executor pod would have, pointing at that driver's scheduler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketcluster.e2e.spark_standalone import StandaloneCluster
from rocketcluster.jobs import k8s_executor
from rocketcluster.jobs.k8s_executor import (
    EXECUTOR_BACKEND,
    LaunchError,
    argv_for,
    executor_argv,
)

HOME = Path("/opt/spark-home")
POD_ENV = {
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@ops-health-report-driver.team-a.svc:7078",
    "SPARK_EXECUTOR_ID": "3",
    "SPARK_EXECUTOR_CORES": "2",
    "SPARK_EXECUTOR_MEMORY": "1024m",
    "SPARK_APPLICATION_ID": "spark-0123abcd",
    "SPARK_EXECUTOR_POD_IP": "10.1.2.3",
    "SPARK_EXECUTOR_POD_NAME": "ops-health-report-exec-3",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_CONF_DIR": "/opt/spark/conf",
    # Spark numbers the JVM options; 10 must come after 2.
    "SPARK_JAVA_OPT_10": "-Dspark.driver.port=7078",
    "SPARK_JAVA_OPT_2": "-Dlog4j2.configurationFile=file:/x/log4j2.properties",
    "SPARK_JAVA_OPT_0": "-XX:+UseSerialGC",
    "JAVA_HOME": "/usr/lib/jvm/java-17",
}


def test_the_executor_command_line_is_what_spark_s_entrypoint_would_run() -> None:
    argv = executor_argv(POD_ENV, HOME)
    backend = argv.index(EXECUTOR_BACKEND)
    jvm, args = argv[:backend], argv[backend + 1 :]
    assert jvm == [
        "/usr/lib/jvm/java-17/bin/java",
        "-XX:+UseSerialGC",
        "-Dlog4j2.configurationFile=file:/x/log4j2.properties",
        "-Dspark.driver.port=7078",
        "-Xms1024m",
        "-Xmx1024m",
        "-cp",
        "/opt/spark/conf:/opt/spark-home/jars/*",
    ]
    assert dict(zip(args[::2], args[1::2], strict=True)) == {
        "--driver-url": POD_ENV["SPARK_DRIVER_URL"],
        "--executor-id": "3",
        "--cores": "2",
        "--app-id": "spark-0123abcd",
        "--hostname": "10.1.2.3",
        "--resourceProfileId": "0",
        "--podName": "ops-health-report-exec-3",
    }


def test_the_user_class_path_comes_before_pyspark_s_jars() -> None:
    env = {**POD_ENV, "SPARK_CLASSPATH": "/extra/a.jar", "SPARK_EXTRA_CLASSPATH": "/extra/b"}
    env.pop("SPARK_CONF_DIR")
    argv = executor_argv(env, HOME)
    assert argv[argv.index("-cp") + 1] == "/extra/a.jar:/opt/spark-home/jars/*:/extra/b"


def test_without_java_home_java_comes_from_the_path() -> None:
    env = {k: v for k, v in POD_ENV.items() if k != "JAVA_HOME"}
    assert executor_argv(env, HOME)[0] == "java"


@pytest.mark.parametrize("missing", ["SPARK_DRIVER_URL", "SPARK_EXECUTOR_POD_IP"])
def test_outside_a_spark_pod_it_says_what_is_missing(missing: str) -> None:
    env = {k: v for k, v in POD_ENV.items() if k != missing}
    with pytest.raises(LaunchError, match=missing):
        executor_argv(env, HOME)


def test_a_driver_pod_runs_spark_submit_in_client_mode_on_its_own_address() -> None:
    env = {"SPARK_DRIVER_BIND_ADDRESS": "10.1.2.4"}
    args = ["driver", "--properties-file", "/opt/spark/conf/spark.properties", "local:///r.py"]
    assert argv_for(args, env, HOME) == [
        "/opt/spark-home/bin/spark-submit",
        "--conf",
        "spark.driver.bindAddress=10.1.2.4",
        "--deploy-mode",
        "client",
        "--properties-file",
        "/opt/spark/conf/spark.properties",
        "local:///r.py",
    ]
    with pytest.raises(LaunchError):
        argv_for(["shell"], env, HOME)


# -- for real: a driver, and an executor started by the launcher ----------------------

_DRIVER = r"""
import json, os, sys, time
from pyspark.sql import SparkSession

spark = (
    SparkSession.builder.master(sys.argv[1])
    .appName("k8s-executor-launcher")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.ui.enabled", "false")
    .getOrCreate()
)
sc = spark.sparkContext
port = sc.getConf().get("spark.driver.port")
url = f"spark://CoarseGrainedScheduler@127.0.0.1:{port}"
print(json.dumps({"driver_url": url, "app_id": sc.applicationId}), flush=True)
deadline = time.monotonic() + 180
while sc._jsc.sc().getExecutorMemoryStatus().size() < 2:
    if time.monotonic() > deadline:
        sys.exit("no executor registered")
    time.sleep(0.2)
rows = (
    sc.parallelize(range(20), 2)
    .map(lambda x: (x * x, os.environ.get("SPARK_EXECUTOR_POD_NAME")))
    .collect()
)
print(json.dumps(rows), flush=True)
spark.stop()
"""


def _clean_env() -> dict[str, str]:
    """This process's environment without Spark settings of its own."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SPARK_", "PYSPARK_")) and k != "SPARK_LOCAL_IP"
    }


@pytest.fixture
def master(tmp_path: Path) -> Iterator[StandaloneCluster]:
    """A standalone Master with no Workers: the only executor is the launcher's."""
    with StandaloneCluster(tmp_path / "standalone", workers=0) as cluster:
        yield cluster


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_an_executor_started_by_the_launcher_runs_a_pyspark_job(
    master: StandaloneCluster, tmp_path: Path
) -> None:
    env = {**_clean_env(), "PYSPARK_PYTHON": sys.executable, "HOME": str(tmp_path)}
    driver = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, master.master_url],
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "driver.log").open("w"),
        text=True,
        env=env,
        cwd=tmp_path,
    )
    executor: subprocess.Popen[str] | None = None
    try:
        assert driver.stdout is not None
        hello = json.loads(driver.stdout.readline() or "null")
        assert hello, (tmp_path / "driver.log").read_text()[-3000:]
        pod_env = {
            **env,
            "SPARK_DRIVER_URL": hello["driver_url"],
            "SPARK_EXECUTOR_ID": "1",
            "SPARK_EXECUTOR_CORES": "1",
            "SPARK_EXECUTOR_MEMORY": "512m",
            "SPARK_APPLICATION_ID": hello["app_id"],
            "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
            "SPARK_EXECUTOR_POD_NAME": "ops-health-report-exec-1",
            "SPARK_RESOURCE_PROFILE_ID": "0",
            "SPARK_JAVA_OPT_0": "-XX:+UseSerialGC",
        }
        executor = subprocess.Popen(
            [sys.executable, "-m", "rocketcluster.jobs.k8s_executor", "executor"],
            stdout=(tmp_path / "executor.log").open("w"),
            stderr=subprocess.STDOUT,
            text=True,
            env=pod_env,
            cwd=tmp_path,
        )
        rows = json.loads(driver.stdout.readline() or "null")
        assert rows, (tmp_path / "driver.log").read_text()[-3000:] + (
            tmp_path / "executor.log"
        ).read_text()[-3000:]
        assert sorted(r[0] for r in rows) == sorted(x * x for x in range(20))
        # Every task ran in the launcher's executor (its Python workers inherit the
        # pod's environment): there is no other.
        assert {r[1] for r in rows} == {"ops-health-report-exec-1"}
        assert driver.wait(timeout=60) == 0
        # The driver's stop tells the executor to exit.
        deadline = time.monotonic() + 60
        while executor.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert executor.poll() is not None, "the executor outlived its driver"
    finally:
        _stop(driver)
        if executor is not None:
            _stop(executor)


def test_main_refuses_to_start_outside_a_spark_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in k8s_executor.REQUIRED:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit, match="SPARK_DRIVER_URL"):
        k8s_executor.main(["executor"])
