"""The entrypoint of Spark's containers on Kubernetes, for the jobs' image.

Spark on Kubernetes starts an executor pod's container with the arguments
``["executor"]`` (and, in cluster mode — the Kubeflow Spark Operator — a driver
pod's with ``["driver", ...spark-submit arguments]``) and leaves the rest to the
image's entrypoint, which reads what Spark put into the container's environment. The
rocketcluster-spark-jobs image has PySpark's distribution, not Spark's container
image, and so no such entrypoint: the operator's pod templates run
``python -m rocketcluster.jobs.k8s_executor`` as the container's command instead.

What Spark sets on an executor pod (resource-managers/kubernetes, the basic executor
feature step; the launch is what Spark's own image does in its entrypoint):

- ``SPARK_DRIVER_URL`` (the driver's scheduler endpoint), ``SPARK_EXECUTOR_ID``,
  ``SPARK_EXECUTOR_CORES``, ``SPARK_EXECUTOR_MEMORY`` (the heap, e.g. ``1024m``),
  ``SPARK_APPLICATION_ID``, ``SPARK_RESOURCE_PROFILE_ID``;
- ``SPARK_EXECUTOR_POD_IP`` and ``SPARK_EXECUTOR_POD_NAME`` from the downward API;
- ``SPARK_JAVA_OPT_<n>``: one JVM option each (``spark.executor.extraJavaOptions``
  split, then the confs an executor needs at start), in the order of ``n``;
- ``SPARK_CLASSPATH`` (``spark.executor.extraClassPath``), optionally
  ``SPARK_EXTRA_CLASSPATH`` and ``SPARK_CONF_DIR``.

:func:`executor_argv` turns that into the executor's JVM command line —
``org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend`` (the executor
backend Spark's image runs: a CoarseGrainedExecutorBackend that can also ask the
driver for its id) with PySpark's jars on the class path — and :func:`main` replaces
this process with it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

EXECUTOR_BACKEND = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
_JAVA_OPT = re.compile(r"^SPARK_JAVA_OPT_([0-9]+)$")
# Environment variables an executor cannot start without.
REQUIRED = (
    "SPARK_DRIVER_URL",
    "SPARK_EXECUTOR_ID",
    "SPARK_EXECUTOR_CORES",
    "SPARK_EXECUTOR_MEMORY",
    "SPARK_APPLICATION_ID",
    "SPARK_EXECUTOR_POD_IP",
)


class LaunchError(ValueError):
    """The environment lacks what Spark sets on its pods."""


def spark_home() -> Path:
    """PySpark's distribution (its ``jars/`` and ``bin/``), without importing it."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise LaunchError("pyspark is not installed in this Python")
    return Path(spec.origin).parent


def java_options(env: Mapping[str, str]) -> list[str]:
    """The ``SPARK_JAVA_OPT_<n>`` values, ordered by ``n`` (numerically)."""
    found = [(int(m.group(1)), value) for key, value in env.items() if (m := _JAVA_OPT.match(key))]
    return [value for _, value in sorted(found)]


def class_path(env: Mapping[str, str], home: Path) -> str:
    """Spark's configuration directory first (when set), the user's class path, then
    PySpark's jars, then any extra class path."""
    parts = []
    if env.get("SPARK_CONF_DIR"):
        parts.append(env["SPARK_CONF_DIR"])
    if env.get("SPARK_CLASSPATH"):
        parts.append(env["SPARK_CLASSPATH"])
    parts.append(str(home / "jars" / "*"))
    if env.get("SPARK_EXTRA_CLASSPATH"):
        parts.append(env["SPARK_EXTRA_CLASSPATH"])
    return ":".join(parts)


def java(env: Mapping[str, str]) -> str:
    home = env.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


def executor_argv(env: Mapping[str, str], home: Path) -> list[str]:
    """The executor JVM's command line from the environment Spark gave the pod."""
    missing = [name for name in REQUIRED if not env.get(name)]
    if missing:
        raise LaunchError(
            f"not started by Spark on Kubernetes: {', '.join(missing)} unset "
            "(the executor's pod spec carries them)"
        )
    memory = env["SPARK_EXECUTOR_MEMORY"]
    argv = [
        java(env),
        *java_options(env),
        f"-Xms{memory}",
        f"-Xmx{memory}",
        "-cp",
        class_path(env, home),
        EXECUTOR_BACKEND,
        "--driver-url",
        env["SPARK_DRIVER_URL"],
        "--executor-id",
        env["SPARK_EXECUTOR_ID"],
        "--cores",
        env["SPARK_EXECUTOR_CORES"],
        "--app-id",
        env["SPARK_APPLICATION_ID"],
        "--hostname",
        env["SPARK_EXECUTOR_POD_IP"],
        "--resourceProfileId",
        env.get("SPARK_RESOURCE_PROFILE_ID") or "0",
    ]
    if env.get("SPARK_EXECUTOR_POD_NAME"):
        argv += ["--podName", env["SPARK_EXECUTOR_POD_NAME"]]
    return argv


def driver_argv(env: Mapping[str, str], home: Path, args: Sequence[str]) -> list[str]:
    """A driver pod of Spark's cluster mode (the Spark Operator's): spark-submit in
    client mode inside the pod, listening on the address Spark gives it."""
    bind = env.get("SPARK_DRIVER_BIND_ADDRESS")
    if not bind:
        raise LaunchError("not a Spark driver pod: SPARK_DRIVER_BIND_ADDRESS unset")
    submit = str(home / "bin" / "spark-submit")
    return [submit, "--conf", f"spark.driver.bindAddress={bind}", "--deploy-mode", "client", *args]


def argv_for(args: Sequence[str], env: Mapping[str, str], home: Path) -> list[str]:
    """What to run for the container's arguments: ``executor`` or ``driver ...``."""
    if list(args[:1]) == ["executor"]:
        return executor_argv(env, home)
    if list(args[:1]) == ["driver"]:
        return driver_argv(env, home, args[1:])
    raise LaunchError(f"expected the argument executor or driver (as Spark passes), got {args!r}")


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        command = argv_for(args, os.environ, spark_home())
    except LaunchError as exc:
        raise SystemExit(f"rocketcluster.jobs.k8s_executor: {exc}") from exc
    environ = dict(os.environ)
    environ.setdefault("SPARK_HOME", str(spark_home()))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(command[0], command, environ)


if __name__ == "__main__":
    main()
