"""``python -m rocketcluster.e2e.images``: build the container images (``make
images``).

    build [--only broker,controller] [--out DIR] [--registry R [--push]]
          [--base IMAGE] [--jre-base IMAGE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rocketcluster.e2e.images.build import BuildError, build_images
from rocketcluster.e2e.images.catalogue import IMAGES, UnknownImage
from rocketcluster.e2e.images.plan import RequirementsError, Settings, WorkspaceError
from rocketcluster.e2e.images.tools import CommandFailed, ToolMissing

EXPECTED = (
    BuildError,
    CommandFailed,
    RequirementsError,
    ToolMissing,
    UnknownImage,
    WorkspaceError,
    ValueError,
)


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m rocketcluster.e2e.images")
    sub = top.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the images (all, or --only some)")
    build.add_argument(
        "--only",
        type=_names,
        default=(),
        help=f"comma-separated: {','.join(s.name for s in IMAGES)} (default: all)",
    )
    build.add_argument("--out", type=Path, default=None, help="write OCI archives here")
    build.add_argument("--registry", default=None, help="also tag as REGISTRY/NAME:VERSION")
    build.add_argument("--push", action="store_true", help="push the registry tags")
    build.add_argument("--base", default=None, help="base image instead of the Debian one")
    build.add_argument("--jre-base", default=None, help="base image (with Java) for Spark")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        settings = Settings(
            only=args.only,
            out=args.out.resolve() if args.out else None,
            registry=args.registry or None,
            push=args.push,
            base=args.base,
            jre_base=args.jre_base,
        )
        build_images(settings)
    except EXPECTED as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
