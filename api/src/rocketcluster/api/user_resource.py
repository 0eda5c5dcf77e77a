"""RocketUser (``rocketcluster.io/v1alpha1``): a user of a RocketCluster managed as a
custom resource, beside ``spec.users`` — as Strimzi's KafkaUser, the operator keeps
the user's keys in a Secret it creates (``<cluster>-user-<name>``: ``accessKey``,
``secretKey``) and never overwrites; rotating a key is editing or deleting that
Secret's data. Every user of the cluster, with its keys and permissions, goes into
the Secret ``<cluster>-users`` that the brokers mount and re-read."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rocketcluster.api.cluster import ObjectMeta
from rocketcluster.api.status import CatalogueStatus
from rocketcluster.api.users import USER_NAME_PATTERN, PermissionSpec, UserSpec

_K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def user_secret_name(cluster: str, user: str) -> str:
    """The Secret that holds one user's keys (a Kubernetes name: lower case, '-')."""
    return f"{cluster}-user-{user.lower().replace('_', '-')}"


def users_secret_name(cluster: str) -> str:
    """The Secret with every user's keys and permissions, mounted into the brokers."""
    return f"{cluster}-users"


def admin_token_secret_name(cluster: str, given: str | None = None) -> str:
    """``security.auth.adminTokenSecret``, or ``<cluster>-admin-token``."""
    return given or f"{cluster}-admin-token"


class RocketUserSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    cluster: str = Field(pattern=_K8S_NAME, description="the RocketCluster, same namespace")
    user_name: str | None = Field(
        default=None,
        alias="userName",
        pattern=USER_NAME_PATTERN,
        description="the access key (default: metadata.name); may hold capitals and '_', "
        "which Kubernetes names may not",
    )
    admin: bool = Field(default=False, description="may do everything, admin API included")
    permissions: list[PermissionSpec] = Field(
        default_factory=list,
        max_length=1000,
        description="allow rules: a topic or group (name, prefix*, or *) and its actions",
    )


class UserStatus(CatalogueStatus):
    """Status of a RocketUser: ``name`` is the access key; ``secretName`` holds it."""

    secret_name: str = Field(default="", description="the Secret with its keys")


class RocketUser(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    api_version: Literal["rocketcluster.io/v1alpha1"] = Field(
        default="rocketcluster.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["RocketUser"] = "RocketUser"
    metadata: ObjectMeta
    spec: RocketUserSpec
    status: UserStatus | None = None

    def user(self) -> UserSpec:
        return UserSpec(
            name=self.spec.user_name or self.metadata.name,
            admin=self.spec.admin,
            permissions=self.spec.permissions,
        )
