"""The emulator's serving certificate, for ``127.0.0.1`` and ``localhost``, from a CA
of its own (``ctl.local.tls.LocalCA``, the local runtime's: one way to make one).

Why TLS at all on loopback: kubectl (client-go's ``clientcmd``) sends a kubeconfig's
credentials only over TLS — against ``http://`` it silently sends no token
(kubernetes/kubectl#744), and every request would be ``system:anonymous``. So the
emulator also listens with TLS, and the kubeconfig names that port with the
certificate as its CA; in-cluster callers (the realiser, pods) keep plain HTTP.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from rocketcluster.ctl.local.tls import LocalCA

CERT, KEY = "tls.crt", "tls.key"


def serving_certificate(directory: Path) -> Path:
    """A CA (``ca.crt``, what a kubeconfig trusts) and a certificate signed by it
    (``tls.crt``, ``tls.key``) in ``directory``; the CA certificate's path."""
    files = LocalCA.ensure(directory, "rocketcluster emulator CA").issue(
        CERT.removesuffix(".crt"), ["127.0.0.1", "localhost"], directory
    )
    return files.ca_file


def server_context(directory: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(directory / CERT, directory / KEY)
    return context
