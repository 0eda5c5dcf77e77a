"""Who a request comes from, as the API server's authenticators decide it.

- The admin token: read from a file (``--admin-token-file``, never argv), its user
  ``admin`` in ``system:masters`` and ``system:authenticated``. kubectl, the harness
  and the realiser use it.
- ServiceAccount tokens, minted by TokenRequest
  (``POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token``) and held in the
  emulator's memory: user ``system:serviceaccount:<ns>:<name>``, groups
  ``system:serviceaccounts``, ``system:serviceaccounts:<ns>``, ``system:authenticated``.
  A token is bound to its ServiceAccount's uid: once that ServiceAccount is gone
  (deleted, or deleted and made again) the token is refused, as a real bound token is.
  Tokens do not expire here.
- No ``Authorization`` header: ``system:anonymous`` in ``system:unauthenticated``.
- A bearer token nobody minted: :data:`UNAUTHORIZED` — the 401 Status.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rocketcluster.e2e.kube.rbac import (
    ANONYMOUS_USER,
    AUTHENTICATED,
    MASTERS,
    UserInfo,
    service_account_user,
)

ADMIN = UserInfo("admin", (MASTERS, AUTHENTICATED))
SA_TOKEN_PREFIX = "rcsa."

# (namespace, name) → the ServiceAccount's uid now, or None if there is none
UidLookup = Callable[[str, str], str | None]


class Unauthorized(Exception):
    """The request carries credentials nobody issued."""


UNAUTHORIZED: dict[str, Any] = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Unauthorized",
    "reason": "Unauthorized",
    "code": 401,
}


@dataclass
class Authenticator:
    admin_token: str | None
    service_account_uid: UidLookup
    _tokens: dict[str, tuple[str, str, str]] = field(default_factory=dict)

    def mint(self, namespace: str, name: str, uid: str) -> str:
        """A new token for the ServiceAccount (TokenRequest)."""
        token = SA_TOKEN_PREFIX + secrets.token_urlsafe(32)
        self._tokens[token] = (namespace, name, uid)
        return token

    def authenticate(self, authorization: str | None) -> UserInfo:
        """The user of an ``Authorization`` header value; :class:`Unauthorized` for
        credentials that are not valid."""
        if not authorization:
            return ANONYMOUS_USER
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("only bearer tokens are accepted")
        if self.admin_token and hmac.compare_digest(token, self.admin_token):
            return ADMIN
        bound = self._tokens.get(token)
        if bound is None:
            raise Unauthorized("unknown token")
        namespace, name, uid = bound
        if self.service_account_uid(namespace, name) != uid:
            raise Unauthorized(f"service account {namespace}/{name} is gone")
        return service_account_user(namespace, name)
