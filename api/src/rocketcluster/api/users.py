"""Users and their permissions, as written in a RocketCluster manifest (``spec.users[]``)
and in RocketUser custom resources (RocketMQ ACL 2.0: an access key per user, allow
rules per topic and consumer group)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

USER_NAME_PATTERN = r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,62}$"


class Action(StrEnum):
    PUB = "pub"  # send to a topic
    SUB = "sub"  # receive from a topic / consume as a group


class PermissionSpec(BaseModel):
    """One allow rule: ``topic`` or ``group`` (a name, or a prefix ending in ``*``;
    ``*`` alone is every one) and what the user may do with it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    topic: str | None = Field(default=None, max_length=256)
    group: str | None = Field(default=None, max_length=256)
    actions: list[Action] = Field(min_length=1)

    @model_validator(mode="after")
    def _one_resource(self) -> PermissionSpec:
        if (self.topic is None) == (self.group is None):
            raise ValueError("a permission names exactly one of topic or group")
        if self.group is not None and Action.PUB in self.actions:
            raise ValueError(f"group {self.group!r}: only 'sub' applies to a consumer group")
        return self


class UserSpec(BaseModel):
    """``spec.users[]`` (and a RocketUser's spec with its name): the access key is the
    user's name; ``admin`` may also use the admin API and rocketctl's write verbs."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    name: str = Field(pattern=USER_NAME_PATTERN)
    admin: bool = False
    permissions: list[PermissionSpec] = Field(default_factory=list)

    @field_validator("permissions")
    @classmethod
    def _not_too_many(cls, value: list[PermissionSpec]) -> list[PermissionSpec]:
        if len(value) > 1000:
            raise ValueError("at most 1000 permissions per user")
        return value
