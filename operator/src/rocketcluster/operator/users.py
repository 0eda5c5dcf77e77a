"""``security.auth`` in the API server: the admin token Secret, one Secret per user,
the users Secret the brokers mount and, with ``spec.console``, the console's session
key Secret (what each holds: render/auth.py). With ``spec.canary`` the canary's user
``rocketcluster-canary`` is one of the users (unless ``spec.users`` names it).

:class:`UsersReconciler` keeps them, for a cluster on every tick (``sync``) and for a
RocketUser when it changes (``put``): a Secret that holds a key is never
overwritten (the user's own, or rotated by hand); a missing one is created with a
random key. The users Secret is rewritten only when its content changes; the kubelet
then updates the mounted file and the brokers re-read it within seconds.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from rocketcluster.api import kube
from rocketcluster.api.auth import (
    ADMIN_TOKEN_KEY,
    SECRET_KEY,
    UserCredentials,
    generate_admin_token,
    generate_secret_key,
)
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.status import ready_conditions
from rocketcluster.api.user_resource import (
    RocketUser,
    UserStatus,
    admin_token_secret_name,
    user_secret_name,
)
from rocketcluster.api.users import UserSpec
from rocketcluster.operator.kube.apply import Applier
from rocketcluster.operator.kube.client import KubeClient
from rocketcluster.operator.render import auth, canary
from rocketcluster.operator.render.meta import component_selector

ROCKET_USER = "RocketUser"


class UserRefused(ValueError):
    """A RocketUser that can never be put as it is (a person must change it)."""


class UserWaiting(RuntimeError):
    """Not yet: its RocketCluster does not exist or has auth off (retried)."""


def rocket_user(body: dict[str, Any]) -> RocketUser:
    meta = {"name": body["metadata"]["name"], "namespace": body["metadata"].get("namespace")}
    try:
        return RocketUser.model_validate({"metadata": meta, "spec": body.get("spec") or {}})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise UserRefused(f"RocketUser {meta['name']}: {problems}") from exc


async def admin_token(client: KubeClient, raw_cluster: dict[str, Any]) -> str | None:
    """The admin token of a RocketCluster (as the API returned it), None with auth off
    or before the operator made it."""
    spec = raw_cluster.get("spec") or {}
    auth_spec = (spec.get("security") or {}).get("auth") or {}
    if not auth_spec.get("enabled"):
        return None
    meta = raw_cluster["metadata"]
    name = admin_token_secret_name(meta["name"], auth_spec.get("adminTokenSecret"))
    secret = await client.get("v1", "Secret", meta.get("namespace", "default"), name)
    return auth.secret_text(secret, ADMIN_TOKEN_KEY)


class UsersReconciler:
    def __init__(self, client: KubeClient, applier: Applier) -> None:
        self._client = client
        self._applier = applier

    async def sync(self, cluster: RocketCluster) -> str | None:
        """Every auth Secret of ``cluster``; the admin token (None with auth off)."""
        if not auth.enabled(cluster):
            return None
        # One list per tick finds the Secrets the operator made (its labels); one not
        # found there is asked for by name before anything is made (a person may have
        # replaced it without the labels: never overwrite a key).
        known = {
            s["metadata"]["name"]: s
            for s in await self._client.list(
                "v1",
                "Secret",
                cluster.metadata.namespace,
                component_selector(cluster, auth.COMPONENT),
            )
        }
        token = await self._admin_token(cluster, known)
        if auth.console_needs_session_key(cluster):
            await self._console_session_key(cluster, known)
        users = [await self._credentials(cluster, user, None, known) for user in cluster.spec.users]
        named = {u.access_key for u in users}
        probe = canary.canary_user(cluster)  # spec.canary signs as its own user
        if probe is not None and probe.name not in named:
            users.append(await self._credentials(cluster, probe, None, known))
            named.add(probe.name)
        for body in await self._rocket_users(cluster):
            try:
                resource = rocket_user(body)
            except UserRefused:
                continue  # its own handler reports it
            if resource.user().name in named:
                continue  # spec.users wins a clash; the RocketUser's status says so
            users.append(await self._credentials(cluster, resource.user(), body, known))
        desired = auth.users_secret(cluster, users)
        live = known.get(desired["metadata"]["name"]) or await self._client.get(
            "v1", "Secret", cluster.metadata.namespace, desired["metadata"]["name"]
        )
        if (live or {}).get("data") != desired["data"]:
            await self._applier.apply(desired)
        return token

    async def _secret(
        self, cluster: RocketCluster, name: str, known: dict[str, dict[str, Any]] | None
    ) -> dict[str, Any] | None:
        found = (known or {}).get(name)
        if found is not None:
            return found
        return await self._client.get("v1", "Secret", cluster.metadata.namespace, name)

    async def _admin_token(
        self, cluster: RocketCluster, known: dict[str, dict[str, Any]] | None = None
    ) -> str:
        name = auth.token_secret(cluster)
        live = await self._secret(cluster, name, known)
        token = auth.secret_text(live, ADMIN_TOKEN_KEY)
        if token is None:
            token = generate_admin_token()
            await self._applier.apply(auth.admin_token_secret(cluster, token))
        return token

    async def _console_session_key(
        self, cluster: RocketCluster, known: dict[str, dict[str, Any]] | None = None
    ) -> None:
        """The console's session key: made once with a random key, then kept (as a
        user's secret key: one that holds a key of 16 characters or more is never
        overwritten)."""
        name = auth.console_session_secret_name(cluster)
        live = await self._secret(cluster, name, known)
        key = auth.secret_text(live, auth.SESSION_KEY)
        if key is None or len(key) < 16:
            await self._applier.apply(auth.console_session_secret(cluster, generate_secret_key()))

    async def _credentials(
        self,
        cluster: RocketCluster,
        user: UserSpec,
        owner: dict[str, Any] | None,
        known: dict[str, dict[str, Any]] | None = None,
    ) -> UserCredentials:
        """The user's keys from its Secret, made first when missing."""
        name = user_secret_name(cluster.name, user.name)
        live = await self._secret(cluster, name, known)
        key = auth.secret_text(live, SECRET_KEY)
        if key is None or len(key) < 16:
            key = generate_secret_key()
            reference = auth.owner_reference(owner) if owner is not None else None
            await self._applier.apply(auth.user_secret(cluster, user, key, reference))
        return UserCredentials.of(user, key)

    async def _rocket_users(self, cluster: RocketCluster) -> list[dict[str, Any]]:
        found = await self._client.list(
            kube.API_VERSION, ROCKET_USER, cluster.metadata.namespace, {}
        )
        return [b for b in found if (b.get("spec") or {}).get("cluster") == cluster.name]

    async def put(self, body: dict[str, Any]) -> None:
        """A RocketUser created or changed: its Secret, then its status. The cluster's
        next tick puts it into the users Secret."""
        try:
            resource = rocket_user(body)
        except UserRefused as exc:
            await self._status(body, "", "", False, "InvalidSpec", str(exc))
            raise
        namespace = body["metadata"]["namespace"]
        raw = await self._client.get(
            kube.API_VERSION, "RocketCluster", namespace, resource.spec.cluster
        )
        if raw is None:
            message = f"RocketCluster {namespace}/{resource.spec.cluster} does not exist"
            await self._status(body, "", "", False, "ClusterMissing", message)
            raise UserWaiting(message)
        cluster = RocketCluster.model_validate(
            {"metadata": raw["metadata"], "spec": raw.get("spec") or {}}
        )
        user = resource.user()
        secret = user_secret_name(cluster.name, user.name)
        if not auth.enabled(cluster):
            message = f"{cluster.name} has security.auth off: its clients need no credentials"
            await self._status(body, user.name, "", False, "AuthDisabled", message)
            raise UserWaiting(message)
        if any(u.name == user.name for u in cluster.spec.users):
            message = f"{cluster.name}'s spec.users already has {user.name!r}: that one applies"
            await self._status(body, user.name, secret, False, "Conflict", message)
            raise UserRefused(message)
        await self._credentials(cluster, user, body)
        await self._status(body, user.name, secret, True, "SecretReady", f"keys in Secret {secret}")

    async def _status(
        self, body: dict[str, Any], name: str, secret: str, ready: bool, reason: str, message: str
    ) -> None:
        status = UserStatus(
            observed_generation=body["metadata"].get("generation"),
            conditions=ready_conditions(body, ready, reason, message),
            name=name,
            secret_name=secret,
        )
        await self._applier.apply_status(
            body, status.model_dump(mode="json", by_alias=True, exclude_none=True)
        )
