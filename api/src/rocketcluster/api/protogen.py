"""Regenerate the gRPC stubs from ``api/proto`` (committed; CI checks they are current).

``python -m rocketcluster.api.protogen [--check]``
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

API_ROOT = Path(__file__).resolve().parents[3]
PROTO_ROOT = API_ROOT / "proto"
OUT_ROOT = API_ROOT / "src"
GENERATED = "rocketcluster/api/generated"


def generate(out_root: Path) -> list[Path]:
    protos = sorted((PROTO_ROOT / GENERATED).glob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    for proto in protos:
        args = [
            "protoc",
            f"-I{PROTO_ROOT}",
            f"-I{include}",
            f"--python_out={out_root}",
            f"--pyi_out={out_root}",
            f"--grpc_python_out={out_root}",
            str(proto.relative_to(PROTO_ROOT)),
        ]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed on {proto}")
    return sorted((out_root / GENERATED).glob("*_pb2*.py*"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the stubs are stale")
    args = parser.parse_args()
    if not args.check:
        for path in generate(OUT_ROOT):
            print(f"generated {path.relative_to(API_ROOT)}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        stale = [
            p.name
            for p in fresh
            if not filecmp.cmp(p, OUT_ROOT / GENERATED / p.name, shallow=False)
        ]
        if stale:
            sys.exit(
                f"generated stubs are stale: {', '.join(stale)}; run python -m {__spec__.name}"
            )
    print("generated stubs are current")


if __name__ == "__main__":
    main()
