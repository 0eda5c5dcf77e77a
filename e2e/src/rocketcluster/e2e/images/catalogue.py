"""What there is to build: the base images and the five deployables. Pure data.

Each image's Containerfile is ``images/<name>/Containerfile``; its context is made by
the builder: ``requirements.txt`` (the third-party pins it installs) and ``wheels/``
(those pins' wheels and the workspace's own). Which pins an image gets is said here
as workspace packages whose locked dependencies it needs (``uv export --package``):
all of them come from uv.lock, PySpark included (through ``rocketcluster-jobs``).
"""

from __future__ import annotations

from dataclasses import dataclass

SUITE = "bookworm"  # Debian 12: Python 3.11, as the workspace requires
PYTHON_VERSION = "3.11"
GLIBC = (2, 36)  # bookworm's; the newest manylinux wheels it runs
ARCH = "x86_64"
SOURCE_URL = "https://github.com/rocketcluster/rocketcluster"
RUN_AS = 10001  # the operator's pods' runAsUser (operator/render/pods.py)
LABEL_PREFIX = "org.opencontainers.image"
# Labels of our own that the builder reads back (never part of the OCI set).
KEY_LABEL = "io.rocketcluster.build-key"
BASE_KEY_LABEL = "io.rocketcluster.base-key"


@dataclass(frozen=True)
class BaseSpec:
    """A Debian root filesystem made with mmdebstrap and imported as an image."""

    name: str  # the image's repository, e.g. localhost/rocketcluster-base
    packages: tuple[str, ...]
    description: str

    @property
    def tag(self) -> str:
        return f"{self.name}:{SUITE}"


BASE = BaseSpec(
    name="localhost/rocketcluster-base",
    packages=("python3", "python3-venv", "ca-certificates"),
    description="Debian 12 with Python 3.11",
)
BASE_JRE = BaseSpec(
    name="localhost/rocketcluster-base-jre",
    packages=(*BASE.packages, "openjdk-17-jre-headless"),
    description="Debian 12 with Python 3.11 and a Java 17 runtime",
)


@dataclass(frozen=True)
class ImageSpec:
    name: str  # short name: the directory under images/ and what --only takes
    title: str  # the image's repository name (and org.opencontainers.image.title)
    base: BaseSpec
    lock_packages: tuple[str, ...]  # workspace packages whose locked pins go in
    project: tuple[str, ...]  # workspace distributions installed from their wheels

    @property
    def containerfile(self) -> str:
        """Relative to the ``images/`` directory."""
        return f"{self.name}/Containerfile"


IMAGES: tuple[ImageSpec, ...] = (
    ImageSpec(
        name="broker",
        title="rocketcluster-broker",
        base=BASE,
        lock_packages=("rocketcluster-broker",),
        # rocketctl goes in without its plotting and operator dependencies (the
        # Containerfile says why); its own imports of them are lazy.
        project=("rocketcluster-api", "rocketcluster-broker", "rocketcluster-ctl"),
    ),
    ImageSpec(
        name="controller",
        title="rocketcluster-controller",
        base=BASE,
        lock_packages=("rocketcluster-controller",),
        project=("rocketcluster-api", "rocketcluster-controller"),
    ),
    ImageSpec(
        name="operator",
        title="rocketcluster-operator",
        base=BASE,
        lock_packages=("rocketcluster-operator",),
        project=("rocketcluster-api", "rocketcluster-operator"),
    ),
    ImageSpec(
        name="console",
        title="rocketcluster-console",
        base=BASE,
        lock_packages=("rocketcluster-console",),
        project=("rocketcluster-api", "rocketcluster-console"),
    ),
    ImageSpec(
        name="spark-jobs",
        title="rocketcluster-spark-jobs",
        base=BASE_JRE,
        lock_packages=("rocketcluster-jobs",),
        project=("rocketcluster-api", "rocketcluster-jobs"),
    ),
)

# Distributions PyPI has only as source: their wheels are built on the host (pip
# wheel, no compiler needed: PySpark is Python and jars) and cached by version.
SDIST_ONLY = frozenset({"pyspark"})


class UnknownImage(ValueError):
    pass


def select(only: list[str] | None) -> tuple[ImageSpec, ...]:
    """The images named (all when ``only`` is empty), in catalogue order."""
    if not only:
        return IMAGES
    known = {spec.name: spec for spec in IMAGES}
    unknown = [name for name in only if name not in known]
    if unknown:
        raise UnknownImage(
            f"no image named {', '.join(repr(n) for n in unknown)}; choose from {', '.join(known)}"
        )
    return tuple(spec for spec in IMAGES if spec.name in only)
