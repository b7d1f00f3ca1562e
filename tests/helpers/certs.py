"""Test certificates made with the openssl command line, and the one a TLS
server presents."""

from __future__ import annotations

import socket
import ssl
import subprocess
from pathlib import Path


def self_signed(host: str, directory: Path, days: int = 30) -> tuple[str, str]:
    """(certificate PEM, key PEM) of a P-256 self-signed certificate for ``host``."""
    cert, key = directory / f"{host}.crt", directory / f"{host}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", str(days), "-subj", f"/CN={host}",
                    "-addext", f"subjectAltName=DNS:{host}"], check=True, capture_output=True)
    return cert.read_text(), key.read_text()


def served_certificate(port: int, sni: str | None, timeout: float = 10.0) -> bytes:
    """DER of the certificate 127.0.0.1:``port`` presents for ``sni`` (None: no SNI)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        with context.wrap_socket(raw, server_hostname=sni) as tls:
            return tls.getpeercert(binary_form=True)
