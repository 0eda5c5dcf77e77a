"""The admin token rocketctl sends (``Authorization: Bearer``) when a cluster's
security.auth is on: ``$ROCKETCTL_ADMIN_TOKEN`` when set (a cluster rocketctl did not
start: ``kubectl get secret <cluster>-admin-token -o jsonpath='{.data.token}' | base64
-d``), else the local cluster's own (``DIR/auth/admin-token``); none otherwise."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from rocketcluster.ctl.local.auth import local_admin_token

TOKEN_ENV: Final = "ROCKETCTL_ADMIN_TOKEN"


def admin_token(directory: Path | None) -> str | None:
    given = os.environ.get(TOKEN_ENV, "").strip()
    if given:
        return given
    return local_admin_token(directory) if directory is not None else None


def bearer(directory: Path | None) -> dict[str, str]:
    """The header to send, or none."""
    token = admin_token(directory)
    return {"authorization": f"Bearer {token}"} if token else {}
