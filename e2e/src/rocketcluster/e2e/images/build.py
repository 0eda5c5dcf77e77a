"""Building the images: the I/O around :mod:`plan`.

1. the mmdebstrap base (or bases) the plans need, from the cache or made, imported
   into buildah's storage (skipped when the image there carries the same key);
2. the wheelhouse for the lock file: every pin the selected images install, fetched
   on the host (pip cannot verify PyPI from inside a build) for the image's Python
   and platform; source-only distributions (PySpark) built into wheels once;
3. the workspace's own wheels (``uv build``);
4. per image a context of its pins and wheels (hard links), then ``buildah bud`` —
   skipped when an image of that tag was built from exactly the same inputs;
5. optionally an OCI archive, a registry tag, a push.

Progress goes to ``out`` one line per step, with sizes and seconds.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from rocketcluster.e2e.images import buildah as bh
from rocketcluster.e2e.images import cache, tools
from rocketcluster.e2e.images.catalogue import BASE_KEY_LABEL, KEY_LABEL, SDIST_ONLY, BaseSpec
from rocketcluster.e2e.images.catalogue import select as select_images
from rocketcluster.e2e.images.plan import (
    ImagePlan,
    Pin,
    Settings,
    Workspace,
    archive_target,
    base_key,
    bases_needed,
    bud_args,
    build_key,
    merge_pins,
    mmdebstrap_argv,
    parse_pins,
    pip_download_args,
    plan_images,
    push_args,
    render_requirements,
    select_wheels,
    wheel_name_version,
    wheelhouse_key,
)
from rocketcluster.e2e.images.workspace import find_root, read_workspace

MB = 1_000_000


class BuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class Built:
    plan: ImagePlan
    image_id: str
    size: int
    seconds: float
    cached: bool
    archive_size: int | None = None


class Progress:
    """One line per step: what, how big, how long."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def line(self, text: str) -> None:
        print(text, file=self.out, flush=True)


def _mb(size: int) -> str:
    return f"{size / MB:.0f} MB"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Builder:
    def __init__(self, workspace: Workspace, root: Path, progress: Progress) -> None:
        self.workspace = workspace
        self.cache = root
        self.progress = progress
        logs = root / "logs"  # the last build's command output, for when one fails
        shutil.rmtree(logs, ignore_errors=True)
        self.log = logs / "build.log"
        self._exports: dict[str, list[Pin]] = {}

    # --- 1. bases ------------------------------------------------------------------

    def ensure_base(self, base: BaseSpec) -> None:
        key = base_key(base)
        found = bh.inspect_image(base.tag)
        if found is not None and found.labels.get(BASE_KEY_LABEL) == key:
            self.progress.line(f"base image {base.tag} cached ({_mb(found.size)})")
            return
        tools.require("mmdebstrap")
        parent = self.cache / "bases" / base.name.rsplit("/", 1)[-1]
        tarball = cache.entry(parent, key) / "rootfs.tar"
        started = time.monotonic()
        made = not tarball.is_file()
        if made:
            tmp = cache.staging(parent, key)
            tools.run(mmdebstrap_argv(base, str(tmp / "rootfs.tar")), log=self.log)
            cache.publish(tmp, parent, key)
            cache.prune(parent, keep=key)
        bh.import_rootfs(tarball, base.tag, {BASE_KEY_LABEL: key}, self.log)
        if found is not None:
            bh.remove_image(found.id)  # the one this replaced, unless still in use
        info = bh.inspect_image(base.tag)
        size = _mb(info.size) if info else "?"
        what = "built" if made else "imported from the cache"
        self.progress.line(
            f"base image {base.tag} {what}: {size} in {time.monotonic() - started:.0f} s"
        )

    # --- 2. wheelhouse -------------------------------------------------------------

    def exported(self, package: str) -> list[Pin]:
        """The locked third-party pins of one workspace package (``uv export``)."""
        if package not in self._exports:
            text = tools.uv_export(self.workspace.root, package)
            self._exports[package] = parse_pins(text, f"uv export --package {package}")
        return self._exports[package]

    def image_pins(self, plan: ImagePlan) -> list[Pin]:
        return merge_pins(*(self.exported(p) for p in plan.spec.lock_packages))

    def ensure_wheelhouse(self, plans: list[ImagePlan]) -> Path:
        """A pool of wheels for the lock file: what the plans need and is not in it
        yet is downloaded (or built, for source-only distributions)."""
        lock = (self.workspace.root / "uv.lock").read_text()
        key = wheelhouse_key(lock)
        parent = self.cache / "wheelhouse"
        pool = cache.entry(parent, key)
        if not pool.is_dir():
            cache.publish(cache.staging(parent, key), parent, key)
            cache.prune(parent, keep=key)
        pins = merge_pins(*(self.image_pins(p) for p in plans))
        present = {wheel_name_version(w.name) for w in pool.glob("*.whl")}
        missing = [p for p in pins if (p.name, p.version) not in present]
        if not missing:
            self.progress.line(f"wheelhouse cached ({len(pins)} pins)")
            return pool
        started = time.monotonic()
        for pin in [p for p in missing if p.name in SDIST_ONLY]:
            self._build_from_source(pin, pool)
        binary = [p for p in missing if p.name not in SDIST_ONLY]
        if binary:
            requirements = pool / ".download-requirements.txt"
            requirements.write_text(render_requirements(binary))
            tools.run(
                [*tools.pip(), *pip_download_args(str(requirements), str(pool))], log=self.log
            )
            requirements.unlink()
        select_wheels(pins, [w.name for w in pool.glob("*.whl")])  # all there now?
        size = sum(w.stat().st_size for w in pool.glob("*.whl"))
        self.progress.line(
            f"wheelhouse: {len(missing)} wheels fetched, {_mb(size)} in "
            f"{time.monotonic() - started:.0f} s"
        )
        return pool

    def _build_from_source(self, pin: Pin, pool: Path) -> None:
        """``pip wheel`` of a source-only distribution, cached by name and version
        (it does not depend on the lock file)."""
        parent = self.cache / "built"
        key = f"{pin.name}-{pin.version}"
        built = cache.entry(parent, key)
        started = time.monotonic()
        if not any(built.glob("*.whl")):
            tmp = cache.staging(parent, key)
            tools.run(
                [*tools.pip(), "wheel", "--quiet", "--no-deps", "-w", str(tmp), pin.line()],
                log=self.log,
            )
            built = cache.publish(tmp, parent, key)
            self.progress.line(
                f"{pin.name} {pin.version} wheel built from source in "
                f"{time.monotonic() - started:.0f} s"
            )
        for wheel in built.glob("*.whl"):
            cache.link_or_copy(wheel, pool / wheel.name)

    # --- 3. the workspace's wheels -------------------------------------------------

    def project_wheels(self, into: Path) -> dict[str, Path]:
        shutil.rmtree(into, ignore_errors=True)
        into.mkdir(parents=True)
        tools.run(
            [*tools.uv(), "build", "--all-packages", "--wheel", "--quiet", "-o", str(into)],
            cwd=self.workspace.root,
            log=self.log,
        )
        return {wheel_name_version(w.name)[0]: w for w in into.glob("*.whl")}

    # --- 4. one image --------------------------------------------------------------

    def context(self, plan: ImagePlan, pool: Path, project: dict[str, Path]) -> Path:
        ctx = self.cache / "work" / plan.spec.name
        shutil.rmtree(ctx, ignore_errors=True)
        (ctx / "wheels").mkdir(parents=True)
        pins = self.image_pins(plan)
        (ctx / "requirements.txt").write_text(render_requirements(pins))
        for name in select_wheels(pins, [w.name for w in pool.glob("*.whl")]):
            cache.link_or_copy(pool / name, ctx / "wheels" / name)
        for dist in plan.spec.project:
            wheel = project.get(dist)
            if wheel is None:
                raise BuildError(f"`uv build --all-packages` made no wheel of {dist}")
            cache.link_or_copy(wheel, ctx / "wheels" / wheel.name)
        return ctx

    def build(self, plan: ImagePlan, ctx: Path) -> Built:
        containerfile = self.workspace.root / "images" / plan.spec.containerfile
        base = bh.inspect_image(plan.base_image)
        files = {
            str(path.relative_to(ctx)): _sha256(path)
            for path in sorted(ctx.rglob("*"))
            if path.is_file()
        }
        key = build_key(containerfile.read_text(), plan.build_args, files, base.id if base else "")
        existing = bh.inspect_image(plan.tag)
        if existing is not None and existing.labels.get(KEY_LABEL) == key:
            self.progress.line(f"{plan.spec.name} {_mb(existing.size)} cached ({plan.tag})")
            return Built(plan, existing.id, existing.size, 0.0, cached=True)
        started = time.monotonic()
        tools.run(
            tools.buildah(*bud_args(plan, str(containerfile), str(ctx), key)),
            log=self.cache / "logs" / f"{plan.spec.name}.log",
        )
        seconds = time.monotonic() - started
        info = bh.inspect_image(plan.tag)
        if info is None:
            raise BuildError(f"buildah bud succeeded but there is no image {plan.tag}")
        if existing is not None and existing.id != info.id:
            bh.remove_image(existing.id)  # the one this replaced, unless still in use
        self.progress.line(f"{plan.spec.name} {_mb(info.size)} in {seconds:.0f} s ({plan.tag})")
        return Built(plan, info.id, info.size, seconds, cached=False)

    # --- 5. archive, tag, push -----------------------------------------------------

    def archive(self, built: Built) -> Built:
        plan = built.plan
        if plan.archive is None:
            return built
        plan.archive.parent.mkdir(parents=True, exist_ok=True)
        plan.archive.unlink(missing_ok=True)
        started = time.monotonic()
        tools.run(tools.buildah("push", "--quiet", plan.tag, archive_target(plan)), log=self.log)
        size = plan.archive.stat().st_size
        self.progress.line(
            f"{plan.spec.name} archive {plan.archive} {_mb(size)} in "
            f"{time.monotonic() - started:.0f} s"
        )
        return Built(plan, built.image_id, built.size, built.seconds, built.cached, size)

    def publish(self, built: Built) -> None:
        plan = built.plan
        if plan.registry_tag is None:
            return
        tools.run(tools.buildah("tag", plan.tag, plan.registry_tag), log=self.log)
        if not plan.push:
            self.progress.line(f"{plan.spec.name} tagged {plan.registry_tag}")
            return
        started = time.monotonic()
        tools.run(
            tools.buildah(*push_args(plan)),
            log=self.log,
        )
        self.progress.line(
            f"{plan.spec.name} pushed to {plan.registry_tag} in {time.monotonic() - started:.0f} s"
        )


def build_images(
    settings: Settings, *, root: Path | None = None, out: TextIO = sys.stdout
) -> list[Built]:
    """Build what ``settings`` selects (see the module's steps); the images built."""
    tools.require("buildah")
    workspace = read_workspace(root or find_root())
    plans = plan_images(select_images(list(settings.only)), workspace, settings)
    progress = Progress(out)
    started = time.monotonic()
    with cache.locked(cache.cache_root()) as cache_dir:
        builder = Builder(workspace, cache_dir, progress)
        for base in bases_needed(plans):
            builder.ensure_base(base)
        pool = builder.ensure_wheelhouse(plans)
        project = builder.project_wheels(cache_dir / "work" / "project")
        done = []
        try:
            for plan in plans:
                built = builder.build(plan, builder.context(plan, pool, project))
                built = builder.archive(built)
                builder.publish(built)
                done.append(built)
        finally:
            shutil.rmtree(cache_dir / "work", ignore_errors=True)
    progress.line(f"{_summary(done)} in {time.monotonic() - started:.0f} s")
    return done


def _summary(done: Iterable[Built]) -> str:
    items = [f"{b.plan.spec.name} {_mb(b.size)}" for b in done]
    return f"images: {', '.join(items) or 'none'}"
