"""PySpark's pins for the Spark jobs image, until a workspace member puts PySpark in
uv.lock: ``images/spark-jobs/requirements.in`` compiled (``uv pip compile``) for the
image's Python and platform, constrained by the whole workspace's locked pins so a
package both name (numpy, tzdata …) gets one version."""

from __future__ import annotations

import tempfile
from pathlib import Path

from rocketcluster.e2e.images import tools
from rocketcluster.e2e.images.catalogue import ARCH, GLIBC, PYTHON_VERSION

SOURCE = "spark-jobs/requirements.in"
TARGET = "spark-jobs/requirements.txt"
HEADER = (
    "# Compiled from requirements.in against uv.lock for Python {python} on "
    "manylinux_{glibc}_{arch}\n"
    "# by `python -m rocketcluster.e2e.images lock-spark`: do not edit by hand.\n"
)


def workspace_pins(root: Path) -> str:
    return tools.uv_export(root)


def compile_spark_requirements(root: Path) -> Path:
    """Write ``images/spark-jobs/requirements.txt``; its path."""
    images = root / "images"
    glibc = f"{GLIBC[0]}_{GLIBC[1]}"
    with tempfile.TemporaryDirectory() as tmp:
        constraints = Path(tmp) / "workspace.txt"
        constraints.write_text(workspace_pins(root))
        compiled = tools.output(
            [
                *tools.uv(),
                "pip",
                "compile",
                str(images / SOURCE),
                "--constraint",
                str(constraints),
                "--python-version",
                PYTHON_VERSION,
                "--python-platform",
                f"{ARCH}-manylinux_{glibc}",
                "--only-binary",
                ":all:",
                "--no-binary",
                "pyspark",
                "--no-header",
                "--no-annotate",
                "--quiet",
            ],
            cwd=root,
        )
    target = images / TARGET
    header = HEADER.format(python=PYTHON_VERSION, glibc=glibc, arch=ARCH)
    target.write_text(header + compiled)
    return target
