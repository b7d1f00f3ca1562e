"""A self-signed serving certificate for `FakeApiServer(tls=True)`.

Why TLS at all: kubectl (client-go's clientcmd) only sends a kubeconfig's
bearer token over TLS, so RBAC tests that drive kubectl need https. The
certificate names 127.0.0.1 and localhost, is its own trust root (the
kubeconfig carries it as certificate-authority-data), and is made once per
process with the `openssl` command line tool (about 20 ms), then reused.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import tempfile
import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class ServingCert:
    cert_file: str
    key_file: str

    def pem(self) -> bytes:
        with open(self.cert_file, "rb") as f:
            return f.read()

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx


_lock = threading.Lock()
_cached: ServingCert | None = None


def serving_cert() -> ServingCert:
    global _cached
    with _lock:
        if _cached is None:
            directory = tempfile.mkdtemp(prefix="fakeapi-tls-")
            cert, key = os.path.join(directory, "tls.crt"), os.path.join(directory, "tls.key")
            subprocess.run(
                ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                 "-nodes", "-days", "3650", "-subj", "/CN=fakeapi",
                 "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-keyout", key, "-out", cert],
                check=True, capture_output=True)
            _cached = ServingCert(cert, key)
        return _cached
