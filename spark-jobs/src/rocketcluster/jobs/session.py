"""A Spark session for the health jobs: local mode where the cluster is, no UI, the
workers on this very Python, and a plain sentence instead of a JVM stack trace when
Java is missing.

On Kubernetes the CronJob runs ``spark-submit`` with its own master; ``master=None``
then leaves the choice to it.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rocketcluster.api.cluster import SPARK_DRIVER_JVM_OPTIONS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOCAL_MASTER = "local[2]"
APP_NAME = "rocketcluster-health"


class JavaMissingError(RuntimeError):
    """Spark needs a Java runtime (17 or 21) and none was found."""


@dataclass(frozen=True)
class SparkSettings:
    master: str | None = LOCAL_MASTER
    driver_memory: str = "1g"
    shuffle_partitions: int = 4
    app_name: str = APP_NAME


def find_java() -> Path:
    """The ``java`` Spark will start: $JAVA_HOME/bin/java, else the first on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return Path(home) / "bin" / "java"
    found = shutil.which("java")
    if found:
        return Path(found)
    raise JavaMissingError(
        "Spark needs Java 17 or 21 and no `java` was found (JAVA_HOME unset, none on "
        "PATH). Install one, e.g. `apt-get install openjdk-17-jre-headless` on Debian "
        "or `brew install openjdk@17` on macOS, or set JAVA_HOME; then run the report "
        "again."
    )


def prepare_environment() -> None:
    """What local mode needs before the JVM starts: loopback only, and Python workers
    that are this interpreter (so they see the same pyarrow and pandas)."""
    find_java()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def spark_session(settings: SparkSettings | None = None) -> SparkSession:
    settings = settings or SparkSettings()
    prepare_environment()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(settings.app_name)
    if settings.master:
        builder = builder.master(settings.master).config(
            "spark.driver.memory", settings.driver_memory
        )
    log_config = Path(__file__).with_name("log4j2.properties")
    conf = {
        # Options of the JVM this session starts (local mode); under spark-submit the
        # driver runs already, started with the CronJob's --driver-java-options.
        "spark.driver.extraJavaOptions": " ".join(
            (f"-Dlog4j2.configurationFile=file:{log_config}", *SPARK_DRIVER_JVM_OPTIONS)
        ),
        # Executors of a standalone or Kubernetes master: the same JVM settings.
        "spark.executor.extraJavaOptions": " ".join(
            (f"-Dlog4j2.configurationFile=file:{log_config}", *SPARK_DRIVER_JVM_OPTIONS)
        ),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.python.filterPushdown.enabled": "true",
        # Driver-only local mode, here and in the CronJob's pod: nothing listens beyond
        # the loopback, whoever chose the master.
        "spark.driver.bindAddress": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    # spark-submit's --conf wins (the operator sizes it to the executors it asks for);
    # else a few partitions: the jobs' shuffles are of per-queue rows, not of history.
    if not spark.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
        spark.conf.set("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
    return spark
