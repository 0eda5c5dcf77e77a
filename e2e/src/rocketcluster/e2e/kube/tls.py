"""The emulator's serving certificate: self-signed, for ``127.0.0.1`` and ``localhost``.

Why TLS at all on loopback: kubectl (client-go's ``clientcmd``) sends a kubeconfig's
credentials only over TLS — against ``http://`` it silently sends no token
(kubernetes/kubectl#744), and every request would be ``system:anonymous``. So the
emulator also listens with TLS, and the kubeconfig names that port with the
certificate as its CA; in-cluster callers (the realiser, pods) keep plain HTTP.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

CERT, KEY = "tls.crt", "tls.key"


def self_signed(directory: Path) -> Path:
    """Write ``tls.crt`` and ``tls.key`` (owner-only) to ``directory``; the cert's path."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rocketcluster-emulator")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_path = directory / KEY
    key_path.unlink(missing_ok=True)
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    cert_path = directory / CERT
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path


def server_context(directory: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(directory / CERT, directory / KEY)
    return context
