"""What a build does, decided without doing any of it. Pure.

Given the catalogue, the workspace's facts (version, git revision, licence) and the
user's settings, :func:`plan_images` says per image: its tag, base, build arguments,
the OCI labels it will carry, where it is pushed and archived. The helpers below
compute the commands' arguments and the cache keys: a base tarball is keyed by its
mmdebstrap recipe (suite, packages, options), the wheelhouse by the lock file and the
target platform, an image by everything that goes into it — so a second build with
nothing changed does nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rocketcluster.e2e.images.catalogue import (
    ARCH,
    BASE,
    BASE_JRE,
    GLIBC,
    KEY_LABEL,
    LABEL_PREFIX,
    PYTHON_VERSION,
    SOURCE_URL,
    SUITE,
    BaseSpec,
    ImageSpec,
)

LOCAL_REGISTRY = "localhost"
NO_LICENSE = "NOASSERTION"  # SPDX: the project does not declare one


def _digest(data: object) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --- the base images -------------------------------------------------------------


def mmdebstrap_argv(base: BaseSpec, output: str) -> list[str]:
    """A minimal Debian root filesystem as a tarball: merged /usr without the
    ``usrmerge`` package (which drags in 50 MB of Perl), no documentation, manual
    pages or translations (copyright files stay). The Java runtime's postinst needs
    the man1 directory to exist even though its pages are left out."""
    return [
        "mmdebstrap",
        "--variant=apt",
        "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
        '--setup-hook=mkdir -p "$1/usr/share/man/man1"',
        f"--include={','.join(base.packages)}",
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        "--dpkgopt=path-include=/usr/share/doc/*/copyright",
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/info/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        SUITE,
        output,
    ]


def base_key(base: BaseSpec) -> str:
    """Changes when the recipe does (suite, packages, options); a new Debian point
    release alone does not rebuild it — delete the cache for that."""
    return _digest({"argv": mmdebstrap_argv(base, "-"), "name": base.name})


# --- the wheelhouse ----------------------------------------------------------------


def platform_tags(glibc: tuple[int, int] = GLIBC, arch: str = ARCH) -> list[str]:
    """Every manylinux tag the base's glibc runs. pip does not widen an explicit
    ``--platform``, and some locked wheels are only ``manylinux_2_28``."""
    major, newest = glibc
    tags = [f"manylinux_{major}_{minor}_{arch}" for minor in range(newest, 4, -1)]
    return [*tags, f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}"]


def pip_download_args(requirements: str, dest: str) -> list[str]:
    """``pip download`` arguments (after ``pip``) for binary wheels of the image's
    Python and platform, whatever this host's are."""
    args = ["download", "--quiet", "--only-binary=:all:", "--no-deps"]
    args += ["--python-version", PYTHON_VERSION, "--implementation", "cp"]
    args += ["--abi", f"cp{PYTHON_VERSION.replace('.', '')}"]  # abi3 and none follow from it
    for tag in platform_tags():
        args += ["--platform", tag]
    return [*args, "-r", requirements, "-d", dest]


def wheelhouse_key(lock_text: str) -> str:
    """The wheelhouse is a pool filled as images need wheels; a new lock file (or
    target platform) starts a new one."""
    return _digest(
        {
            "lock": hashlib.sha256(lock_text.encode()).hexdigest(),
            "platforms": platform_tags(),
            "python": PYTHON_VERSION,
        }
    )


# --- requirements and wheels -------------------------------------------------------


class RequirementsError(ValueError):
    """A requirements file the builder cannot install exactly."""


@dataclass(frozen=True)
class Pin:
    name: str  # normalized (PEP 503)
    version: str
    marker: str = ""  # an environment marker, as written

    def line(self) -> str:
        return f"{self.name}=={self.version}" + (f" ; {self.marker}" if self.marker else "")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==\s*(?P<version>[^\s;]+)"
    r"\s*(?:;\s*(?P<marker>.+))?$"
)


def parse_pins(text: str, source: str) -> list[Pin]:
    """``name==version`` lines (comments, blanks and ``-e`` workspace lines skipped);
    anything else — a range, a URL, an option — is refused: the image must get
    exactly what the lock says."""
    pins = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#") or line.startswith("-e "):
            continue
        match = _PIN.match(line)
        if match is None:
            raise RequirementsError(
                f"{source}:{number}: {raw.strip()!r} is not an exact pin (name==version)"
            )
        pins.append(
            Pin(normalize(match["name"]), match["version"], (match["marker"] or "").strip())
        )
    return pins


def merge_pins(*sets: Iterable[Pin]) -> list[Pin]:
    """One list of every pin, sorted; the same package pinned twice differently is
    an error (one lock file cannot say that: the sets came from different locks)."""
    merged: dict[str, Pin] = {}
    for pins in sets:
        for pin in pins:
            seen = merged.get(pin.name)
            if seen is not None and seen.version != pin.version:
                raise RequirementsError(
                    f"{pin.name} is pinned to both {seen.version} and {pin.version}: "
                    "the pins must all come from one uv.lock (uv lock, then build again)"
                )
            merged[pin.name] = pin
    return [merged[name] for name in sorted(merged)]


def render_requirements(pins: Iterable[Pin]) -> str:
    return "".join(f"{pin.line()}\n" for pin in pins)


def wheel_name_version(filename: str) -> tuple[str, str]:
    """(normalized name, version) of a wheel file name."""
    parts = filename.removesuffix(".whl").split("-")
    if not filename.endswith(".whl") or len(parts) < 5:
        raise RequirementsError(f"{filename!r} is not a wheel file name")
    return normalize(parts[0]), parts[1]


class MissingWheels(RequirementsError):
    pass


def select_wheels(pins: Iterable[Pin], filenames: Iterable[str]) -> list[str]:
    """The wheels of these pins among ``filenames``. A pin with no wheel is an error,
    unless it has an environment marker (pip skipped it for the image's platform)."""
    by_key: dict[tuple[str, str], list[str]] = {}
    for name in filenames:
        if name.endswith(".whl"):
            by_key.setdefault(wheel_name_version(name), []).append(name)
    chosen, missing = [], []
    for pin in pins:
        found = by_key.get((pin.name, pin.version))
        if found:
            chosen += sorted(found)
        elif not pin.marker:
            missing.append(f"{pin.name}=={pin.version}")
    if missing:
        raise MissingWheels(f"no wheel in the wheelhouse for {', '.join(missing)}")
    return chosen


# --- the workspace -----------------------------------------------------------------


class WorkspaceError(ValueError):
    pass


def workspace_version(versions: Mapping[str, str]) -> str:
    """The one version every workspace member has: images are versioned with it."""
    found = set(versions.values())
    if len(found) != 1:
        listed = ", ".join(f"{name} {version}" for name, version in sorted(versions.items()))
        raise WorkspaceError(
            f"the workspace members' versions differ ({listed or 'no members'}): "
            "images carry one version — make them equal in the members' pyproject.toml"
        )
    return found.pop()


def license_expression(project: Mapping[str, object]) -> str:
    """The ``[project] license`` of a pyproject (a string or ``{text = …}``), else the
    SPDX word for "not declared"."""
    value = project.get("license")
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, Mapping) and isinstance(value.get("text"), str):
        return str(value["text"]).strip() or NO_LICENSE
    return NO_LICENSE


@dataclass(frozen=True)
class Workspace:
    root: Path
    version: str
    revision: str  # the git commit, "-dirty" when the tree has changes; "unknown"
    licenses: str


# --- the plan ----------------------------------------------------------------------

_REGISTRY = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*$")


def validate_registry(registry: str) -> str:
    """``host[:port][/namespace…]``, as image references want it."""
    value = registry.strip().rstrip("/")
    if "://" in value:
        raise ValueError(
            f"registry {registry!r}: give it without a scheme, e.g. ghcr.io/acme or localhost:5000"
        )
    if not _REGISTRY.match(value):
        raise ValueError(
            f"registry {registry!r} is not host[:port][/namespace] in lower case, e.g. ghcr.io/acme"
        )
    return value


def loopback_registry(registry: str) -> bool:
    """A registry on this machine (localhost, 127.x): pushed to without TLS, as
    Docker treats 127.0.0.0/8 — a registry started for a test speaks plain HTTP."""
    host = registry.split("/", 1)[0].rsplit(":", 1)[0]
    return host == "localhost" or host.startswith("127.")


def push_args(plan: ImagePlan) -> list[str]:
    """``buildah push`` arguments (after ``buildah``) for the plan's registry tag."""
    if plan.registry_tag is None:
        raise ValueError(f"{plan.spec.name}: no registry to push to")
    tls = ["--tls-verify=false"] if loopback_registry(plan.registry_tag) else []
    return ["push", "--quiet", *tls, plan.registry_tag, f"docker://{plan.registry_tag}"]


@dataclass(frozen=True)
class Settings:
    only: tuple[str, ...] = ()
    out: Path | None = None  # write OCI archives here
    registry: str | None = None  # tag as REGISTRY/NAME:VERSION too
    push: bool = False  # and push there
    base: str | None = None  # an existing base image instead of the mmdebstrap one
    jre_base: str | None = None

    def __post_init__(self) -> None:
        if self.push and not self.registry:
            raise ValueError("--push needs --registry (where to push to)")
        if self.registry is not None:
            object.__setattr__(self, "registry", validate_registry(self.registry))


@dataclass(frozen=True)
class ImagePlan:
    spec: ImageSpec
    tag: str  # localhost/NAME:VERSION
    base_image: str
    build_args: dict[str, str]
    labels: dict[str, str]  # the OCI labels the image will carry (description aside)
    registry_tag: str | None = None
    push: bool = False
    archive: Path | None = None
    local_base: BaseSpec | None = field(default=None)  # made here with mmdebstrap

    @property
    def pull_never(self) -> bool:
        """Local bases are never pulled (nothing to pull them from); a base given
        by name is pulled when missing."""
        return self.base_image.startswith(f"{LOCAL_REGISTRY}/")


def oci_labels(spec: ImageSpec, workspace: Workspace) -> dict[str, str]:
    return {
        f"{LABEL_PREFIX}.title": spec.title,
        f"{LABEL_PREFIX}.source": SOURCE_URL,
        f"{LABEL_PREFIX}.version": workspace.version,
        f"{LABEL_PREFIX}.revision": workspace.revision,
        f"{LABEL_PREFIX}.licenses": workspace.licenses,
    }


def plan_image(spec: ImageSpec, workspace: Workspace, settings: Settings) -> ImagePlan:
    override = settings.jre_base if spec.base is BASE_JRE else settings.base
    base_image = override or spec.base.tag
    version = workspace.version
    registry_tag = f"{settings.registry}/{spec.title}:{version}" if settings.registry else None
    archive = settings.out / f"{spec.title}-{version}.oci.tar" if settings.out else None
    return ImagePlan(
        spec=spec,
        tag=f"{LOCAL_REGISTRY}/{spec.title}:{version}",
        base_image=base_image,
        build_args={
            "BASE": base_image,
            "VERSION": version,
            "REVISION": workspace.revision,
            "LICENSES": workspace.licenses,
        },
        labels=oci_labels(spec, workspace),
        registry_tag=registry_tag,
        push=settings.push,
        archive=archive,
        local_base=None if override else spec.base,
    )


def plan_images(
    specs: Iterable[ImageSpec], workspace: Workspace, settings: Settings
) -> list[ImagePlan]:
    return [plan_image(spec, workspace, settings) for spec in specs]


def bases_needed(plans: Iterable[ImagePlan]) -> list[BaseSpec]:
    """The mmdebstrap bases the plans use, each once, the plain one first."""
    wanted = {p.local_base for p in plans if p.local_base is not None}
    return [b for b in (BASE, BASE_JRE) if b in wanted]


def bud_args(plan: ImagePlan, containerfile: str, context: str, key: str) -> list[str]:
    """``buildah bud`` arguments (after ``buildah``). The build key is a label of our
    own, read back to skip a build whose inputs have not changed."""
    args = ["bud", "--isolation", "chroot", "--layers=false"]
    args.append("--pull-never" if plan.pull_never else "--pull")
    for name, value in plan.build_args.items():
        args += ["--build-arg", f"{name}={value}"]
    args += ["--label", f"{KEY_LABEL}={key}", "-t", plan.tag]
    return [*args, "-f", containerfile, context]


def build_key(
    containerfile: str, build_args: Mapping[str, str], files: Mapping[str, str], base_id: str
) -> str:
    """Everything that goes into an image: its Containerfile's text, its build
    arguments, its context (relative path → content digest) and its base's id."""
    return _digest(
        {
            "containerfile": containerfile,
            "args": dict(build_args),
            "files": dict(files),
            "base": base_id,
        }
    )


def archive_target(plan: ImagePlan) -> str:
    """The oci-archive destination, named so that a loader (podman load, ctr import,
    skopeo) gives the image its reference."""
    if plan.archive is None:
        raise ValueError(f"{plan.spec.name}: no archive directory was given")
    return f"oci-archive:{plan.archive}:{plan.registry_tag or plan.tag}"
