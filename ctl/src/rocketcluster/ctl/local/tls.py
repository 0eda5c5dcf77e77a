"""A local certificate authority for ``rocketctl local up`` with
``spec.security.tls.enabled``: what cert-manager is to the operator.

``DIR/tls/ca.crt`` (and its key) is made once per directory and kept, so clients
pointed at it keep working across ``down`` / ``up``; every process gets a certificate
of its own at each ``up`` (its addresses may change), with SANs for its loopback
address, ``localhost`` and ``127.0.0.1`` — and, for brokers, the group endpoint's
address, since the local proxy passes TLS through and clients then see the broker's
certificate under the proxy's address. ``rocketctl`` gets a client certificate too:
the controller port requires one (mutual TLS).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.api.tls import TlsFiles
from rocketcluster.ctl.local.plan import ProcessPlan, ProxyConfig

CA_DAYS = 3650
LEAF_DAYS = 365
CLIENT_NAME = "rocketctl"


def _write_private(path: Path, data: bytes) -> None:
    """Write a key readable by its owner alone, atomically (a reader never sees half)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(tmp, path)


def _write_public(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _san(hosts: Iterable[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    seen: set[str] = set()
    for host in hosts:
        if host in seen:
            continue
        seen.add(host)
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


@dataclass(frozen=True)
class LocalCA:
    """A CA key and certificate on disk; ``issue`` signs leaf certificates with it."""

    directory: Path
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.crt"

    @classmethod
    def ensure(cls, directory: Path, common_name: str = "rocketcluster local CA") -> LocalCA:
        """The CA in ``directory``, created when there is none yet."""
        directory.mkdir(parents=True, exist_ok=True)
        key_path, cert_path = directory / "ca.key", directory / "ca.crt"
        if key_path.exists() and cert_path.exists():
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise ValueError(f"{key_path} is not an EC key: remove {directory} to start over")
            return cls(directory, key, x509.load_pem_x509_certificate(cert_path.read_bytes()))
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        _write_private(key_path, _key_pem(key))
        _write_public(cert_path, cert.public_bytes(serialization.Encoding.PEM))
        return cls(directory, key, cert)

    def issue(
        self, name: str, hosts: Iterable[str], out: Path | None = None, *, days: int = LEAF_DAYS
    ) -> TlsFiles:
        """A key and certificate for ``name`` valid for ``hosts`` (plus localhost),
        usable as server and as client (the same certificate serves a broker's ports
        and authenticates it to the controllers and its master). Written to
        ``out/name.crt`` and ``out/name.key``, replacing earlier ones atomically."""
        out = out or self.directory
        out.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_san([*hosts, "localhost", "127.0.0.1"]), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        files = TlsFiles(
            ca_file=self.ca_file, cert_file=out / f"{name}.crt", key_file=out / f"{name}.key"
        )
        # Key first: a reader that sees the new certificate finds its key already there.
        _write_private(files.key_file, _key_pem(key))
        _write_public(files.cert_file, cert.public_bytes(serialization.Encoding.PEM))
        return files


def certificate_serial(path: Path) -> int:
    """The serial number of the (first) certificate in ``path``."""
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def issue_local_tls(directory: Path, plans: list[ProcessPlan]) -> TlsFiles:
    """Make sure the CA exists, give every planned process a certificate (filling the
    ``tls`` of its config) and return ``rocketctl``'s client certificate."""
    ca = LocalCA.ensure(directory / "tls")
    out = directory / "tls" / "issued"
    for plan in plans:
        config = plan.config
        if isinstance(config, ProxyConfig):
            config.tls = ca.issue(plan.name, [plan.host], out).model_dump(
                mode="json", by_alias=True
            )
        elif isinstance(config, BrokerProcessConfig):
            hosts = [plan.host, config.advertised_host]
            if config.group_endpoint:  # the proxy passes TLS through: clients see us there
                hosts.append(config.group_endpoint.rpartition(":")[0])
            config.tls = ca.issue(plan.name, hosts, out)
        else:
            config.tls = ca.issue(plan.name, [plan.host], out)
    return ca.issue(CLIENT_NAME, [], out)
