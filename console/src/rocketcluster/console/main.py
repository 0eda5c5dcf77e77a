"""``rocketcluster-console --config FILE``: serve the console (uvicorn) for the
cluster the file describes (``ConsoleConfig``, JSON or YAML)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import uvicorn
import yaml
from pydantic import ValidationError

from rocketcluster.api.console_config import ConsoleConfig

DEFAULT_LISTEN = "0.0.0.0:8090"


class ConfigError(ValueError):
    pass


def load_config(path: Path) -> ConsoleConfig:
    """The file's ConsoleConfig; ConfigError naming the file and the field."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(
            f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}"
        ) from None
    try:
        return ConsoleConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'file'}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"{path}: {problems}") from None


def split_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"--listen {listen!r}: give HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="rocketcluster-console", description=__doc__)
    parser.add_argument("--config", type=Path, required=True, help="the console's config file")
    parser.add_argument("--listen", default=DEFAULT_LISTEN, help="HOST:PORT to serve on")
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    try:
        config = load_config(args.config)
        host, port = split_listen(args.listen)
        from rocketcluster.console.app import create_console_app

        app = create_console_app(config)
    except (ConfigError, ValueError, OSError) as exc:
        print(f"rocketcluster-console: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    uvicorn.run(app, host=host, port=port, log_level=args.log_level, access_log=False)


if __name__ == "__main__":
    main()
