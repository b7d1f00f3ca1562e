"""Test certificates made with the openssl command line."""

from __future__ import annotations

import subprocess
from pathlib import Path


def self_signed(host: str, directory: Path, days: int = 30) -> tuple[str, str]:
    """(certificate PEM, key PEM) of a P-256 self-signed certificate for ``host``."""
    cert, key = directory / f"{host}.crt", directory / f"{host}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", str(days), "-subj", f"/CN={host}",
                    "-addext", f"subjectAltName=DNS:{host}"], check=True, capture_output=True)
    return cert.read_text(), key.read_text()
