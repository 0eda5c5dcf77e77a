"""ConsoleConfig: what the console process reads at start (``--config FILE``, JSON or
YAML), written by the operator into a ConfigMap and by ``rocketctl console`` for a
local cluster.

The console reads the cluster only through the controllers' and brokers' admin APIs,
so the file names those endpoints, how to trust them (a CA bundle when TLS is on) and
the credentials the console itself uses (the admin token). With auth on, people sign
in with the admin token or a user's access key / secret key, checked against the
same users file the brokers read (re-read when it changes, as the brokers do).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

ADMIN_URL_PATTERN = r"^https?://[^/\s]+$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class ConsoleBroker(_Model):
    """One broker's admin API: ``http(s)://host:port``, and the group it belongs to."""

    name: str = Field(min_length=1, max_length=253)
    group: str = Field(min_length=1, max_length=253)
    admin: str = Field(pattern=ADMIN_URL_PATTERN)


class ConsoleAuth(_Model):
    """Sign-in: off unless ``enabled``; then the console needs the admin token (it
    calls the admin APIs with it and accepts it as a sign-in) and the users file
    (access key / secret key / ACLs)."""

    enabled: bool = False
    admin_token_file: Path | None = None
    users_file: Path | None = None
    # The key sessions are signed with; replicas of one console must share it (the
    # operator mounts a Secret). Unset: a random key per process (sessions end with it).
    session_key_file: Path | None = None
    session_seconds: int = Field(default=3600, ge=60, le=7 * 86_400)


class ConsoleConfig(_Model):
    cluster: str = Field(min_length=1, max_length=253)
    # Empty for a standalone cluster (no controllers): the brokers are read alone.
    controllers: list[str] = Field(default_factory=list, max_length=16)
    brokers: list[ConsoleBroker] = Field(default_factory=list, max_length=4096)
    # A CA bundle to verify https admin endpoints with (TLS on); unset: the system's.
    ca_file: Path | None = None
    auth: ConsoleAuth = Field(default_factory=ConsoleAuth)
    # Where the health-report CronJob writes its runs (read-only here); unset: no
    # reports page content, the page says so.
    reports_dir: Path | None = None
    # Actions (offset resets, DLQ resends, test sends) are appended here as JSON lines
    # (and logged); unset: logged only.
    audit_log: Path | None = None
    # Seconds an admin API call may take before the page says the endpoint is down.
    request_timeout_seconds: float = Field(default=5.0, gt=0, le=120)

    @field_validator("controllers")
    @classmethod
    def _urls(cls, value: list[str]) -> list[str]:
        import re

        bad = [u for u in value if not re.match(ADMIN_URL_PATTERN, u)]
        if bad:
            raise ValueError(f"controllers must be http(s)://host:port URLs, not {bad}")
        return value
