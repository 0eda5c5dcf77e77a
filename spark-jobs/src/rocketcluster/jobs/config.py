"""Settings of the health jobs: the price table the tiering job projects savings with,
the lag window, the tiering age threshold and how far back the reports look.

Keys are snake_case or camelCase (the spelling of ``spec.healthReports`` in a
RocketCluster manifest, whose ``prices`` and ``historyHours`` the operator can copy here
as they are). Unknown keys are refused: a typo in a price must not silently fall back to
the default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

GIB = 1 << 30
MIB = 1 << 20
MS_PER_HOUR = 3_600_000


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class PriceTable(_Model):
    """Storage prices in one currency. "GB" is what cloud bills call a GB: 2^30 bytes.

    The defaults are examples (AWS list prices, us-east-1, 2025): gp3 block storage
    0.08 per GB-month for the brokers' disks, S3 Standard 0.023 per GB-month for the
    tier. S3 Standard-IA would be ``object_gb_month=0.0125, retrieval_per_gb=0.01``;
    request costs (S3 PUT: 0.005 per 1,000) are off by default because our tiered store
    uploads in large parts and they are then negligible.
    """

    local_gb_month: float = Field(default=0.08, ge=0, description="local disk, per GB-month")
    object_gb_month: float = Field(
        default=0.023, ge=0, description="object storage (the tier), per GB-month"
    )
    put_per_1000: float = Field(
        default=0.0, ge=0, description="object storage write requests, per 1,000 (one-off)"
    )
    upload_part_bytes: int = Field(
        default=8 * MIB, gt=0, description="bytes per upload request (the tier's batch size)"
    )
    amortize_months: float = Field(
        default=12.0, gt=0, description="months the one-off upload cost is spread over"
    )
    retrieval_per_gb: float = Field(
        default=0.0,
        ge=0,
        description=(
            "reading back from the tier, per GB; charged once a month for data read in "
            "the last 30 days (it is likely to be read again)"
        ),
    )


class JobsConfig(_Model):
    prices: PriceTable = Field(default_factory=PriceTable)
    window_points: int = Field(
        default=10, ge=1, le=1000, description="snapshots per queue the lag status looks at"
    )
    min_age_hours: float = Field(
        default=24.0, ge=0, description="data younger than this is never a tiering candidate"
    )
    history_hours: float = Field(
        default=24.0, gt=0, le=24 * 366, description="how far back the reports read"
    )

    @property
    def min_age_ms(self) -> int:
        return round(self.min_age_hours * MS_PER_HOUR)

    @property
    def history_ms(self) -> int:
        return round(self.history_hours * MS_PER_HOUR)


class ConfigError(ValueError):
    """A jobs configuration file that cannot be used; the message says where and why."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def parse_config(raw: Any, *, source: Path) -> JobsConfig:
    """A JobsConfig from already parsed data (a mapping, or None/empty for defaults)."""
    if raw is None:
        return JobsConfig()
    if not isinstance(raw, dict):
        raise ConfigError(
            source, f"expected a mapping of settings at the top, found {type(raw).__name__}"
        )
    try:
        return JobsConfig.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False):
            where = ".".join(str(p) for p in error["loc"]) or "(top)"
            message = str(error["msg"])
            if error["type"] == "extra_forbidden":
                message = "unknown setting"
            problems.append(f"{where}: {message}")
        raise ConfigError(source, "; ".join(problems)) from exc


def load_config(path: str | Path) -> JobsConfig:
    """Read a YAML or JSON file (JSON is YAML, so one parser reads both)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(path, "no such file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, f"cannot read it: {exc}") from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(path, f"not valid YAML/JSON{where}: {problem}") from exc
    return parse_config(raw, source=path)
