"""What the operator trusts when it calls a cluster's admin APIs over https.

A cluster with ``spec.security.tls`` serves its admin APIs over https with the
certificate of the Secret ``secretName``. The operator dials pod IPs (never cached
Service addresses), which that certificate does not name: it checks the certificate
against ``ca.crt`` of the same Secret, for a name the certificate does carry
(``render.tls.server_name``), sent as SNI.

The CA is read through the API, not mounted: the operator serves clusters in any
namespace and a pod can mount Secrets of its own namespace only; reading it also follows
a renewed CA without restarting the operator. One HTTP client per distinct CA, kept
while the CA is unchanged (its connections are reused across ticks).
"""

from __future__ import annotations

import base64
import binascii
import ssl
from dataclasses import dataclass, field

import httpx

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.operator.admin import AdminError
from rocketcluster.operator.kube.client import KubeClient
from rocketcluster.operator.render import tls


@dataclass(frozen=True)
class AdminHttp:
    """How to reach one cluster's admin APIs: the client, and the name to verify (None:
    plain http)."""

    client: httpx.AsyncClient
    server_name: str | None = None


@dataclass
class AdminTrust:
    """Per-cluster admin clients; ``plain`` serves every cluster without TLS."""

    kube: KubeClient
    plain: httpx.AsyncClient
    _by_ca: dict[bytes, httpx.AsyncClient] = field(default_factory=dict)

    async def for_cluster(self, cluster: RocketCluster) -> AdminHttp:
        if not tls.enabled(cluster):
            return AdminHttp(self.plain)
        ns, name = cluster.metadata.namespace, tls.secret_name(cluster)
        secret = await self.kube.get("v1", "Secret", ns, name)
        encoded = ((secret or {}).get("data") or {}).get(tls.CA_KEY)
        if not encoded:
            raise AdminError(
                f"Secret {ns}/{name} {'has no ' + tls.CA_KEY if secret else 'does not exist'}: "
                "the operator checks the cluster's admin certificates against it "
                "(spec.security.tls.secretName)"
            )
        try:
            ca = base64.b64decode(encoded)
        except (binascii.Error, ValueError) as exc:
            raise AdminError(f"Secret {ns}/{name}: {tls.CA_KEY} is not base64") from exc
        client = self._by_ca.get(ca)
        if client is None:
            try:
                context = ssl.create_default_context(cadata=ca.decode("ascii", "replace"))
            except ssl.SSLError as exc:
                raise AdminError(f"Secret {ns}/{name}: {tls.CA_KEY} is not a CA: {exc}") from exc
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            client = self._by_ca[ca] = httpx.AsyncClient(verify=context)
        return AdminHttp(client, tls.server_name(cluster))

    async def close(self) -> None:
        for client in self._by_ca.values():
            await client.aclose()
        self._by_ca.clear()
