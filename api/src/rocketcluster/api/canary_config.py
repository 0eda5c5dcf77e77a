"""CanaryConfig: what the canary process (``rocketctl canary --config FILE``) reads,
JSON or YAML, written by the operator into a ConfigMap (``spec.canary``) and by
``rocketctl canary --dir`` for a local cluster.

The canary is a client like the applications: each broker group is named with the
endpoint applications reach it at (its client Service in Kubernetes, its group
endpoint locally), and the file says how to trust it (a CA bundle when TLS is on) and
which credentials to sign with (an access key and a file holding its secret key when
auth is on). The process re-reads the file when it changes: a scale-out's new group
is probed, a scale-in's leaving group no longer is, without a restart.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from rocketcluster.api.names import (
    DLQ_PREFIX,
    RETRY_PREFIX,
    SYSTEM_TOPIC_PREFIX,
    group_name_problem,
    topic_name_problem,
)
from rocketcluster.api.topics import ConsumerGroupSpec, TopicSpec, TraceMode

DEFAULT_TOPIC: Final = "rocketcluster-canary"
DEFAULT_CONSUMER_GROUP: Final = "rocketcluster-canary"
# The canary user's name (auth on): the operator keeps its Secret like any user's.
CANARY_USER: Final = "rocketcluster-canary"
ENDPOINT_PATTERN: Final = r"^[^\s/;]+:[0-9]{1,5}$"
_RESERVED: Final = (SYSTEM_TOPIC_PREFIX, RETRY_PREFIX, DLQ_PREFIX)


def canary_topic_problem(name: str) -> str | None:
    """Why ``name`` cannot be the canary's topic (or consumer group), or None: a valid
    name that is not a system, retry or dead-letter name."""
    if name.startswith(_RESERVED):
        return f"names starting with {', '.join(_RESERVED)} are reserved"
    return topic_name_problem(name)


def canary_group_problem(name: str) -> str | None:
    if name.startswith(_RESERVED):
        return f"names starting with {', '.join(_RESERVED)} are reserved"
    return group_name_problem(name)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class CanaryGroup(_Model):
    """One broker group and the ``host:port`` its clients use."""

    name: str = Field(min_length=1, max_length=253)
    endpoint: str = Field(pattern=ENDPOINT_PATTERN, max_length=300)


class CanaryCredentials(_Model):
    """With security.auth: the access key, and the file its secret key is read from
    (re-read at every probe, so a rotated Secret applies without a restart)."""

    access_key: str = Field(min_length=1, max_length=63)
    secret_key_file: Path


class CanaryConfig(_Model):
    cluster: str = Field(min_length=1, max_length=253)
    groups: list[CanaryGroup] = Field(default_factory=list, max_length=64)
    topic: str = DEFAULT_TOPIC
    consumer_group: str = DEFAULT_CONSUMER_GROUP
    # One probe per group every interval; a probe that has not seen its message come
    # back within the timeout fails (receive_timeout).
    interval_seconds: float = Field(default=5.0, ge=0.2, le=300)
    timeout_seconds: float = Field(default=10.0, ge=0.5, le=300)
    # A CA bundle to verify the client port with (TLS on); unset: plaintext.
    ca_file: Path | None = None
    credentials: CanaryCredentials | None = None

    @field_validator("topic")
    @classmethod
    def _topic(cls, value: str) -> str:
        problem = canary_topic_problem(value)
        if problem:
            raise ValueError(f"topic {value!r}: {problem}")
        return value

    @field_validator("consumer_group")
    @classmethod
    def _group(cls, value: str) -> str:
        problem = canary_group_problem(value)
        if problem:
            raise ValueError(f"consumer group {value!r}: {problem}")
        return value

    @model_validator(mode="after")
    def _unique_groups(self) -> Self:
        names = [g.name for g in self.groups]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"broker groups listed twice: {', '.join(dupes)}")
        return self


class CanaryConfigError(ValueError):
    """A config file that cannot be used: says which file and what is wrong."""


def load_canary_config(path: Path) -> CanaryConfig:
    """``path`` (JSON or YAML) as a CanaryConfig, or a CanaryConfigError naming the
    file and every field that is wrong."""
    from pydantic import ValidationError

    try:
        text = path.read_text()
    except OSError as exc:
        raise CanaryConfigError(f"{path}: cannot read it: {exc.strerror or exc}") from exc
    try:
        data = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise CanaryConfigError(f"{path}: neither JSON nor YAML: {exc}") from exc
    try:
        return CanaryConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()
        )
        raise CanaryConfigError(f"{path}: {problems}") from exc


def catalogue_entries(topic: str, consumer_group: str) -> tuple[TopicSpec, ConsumerGroupSpec]:
    """The canary's topic and consumer group as the catalogue holds them: one queue
    per broker group is all a probe needs, and no server-side traces (a probe every
    few seconds would fill RMQ_SYS_TRACE_DATA with nothing worth reading)."""
    return (
        TopicSpec(name=topic, queues=1, trace=TraceMode.OFF),
        ConsumerGroupSpec(name=consumer_group),
    )
