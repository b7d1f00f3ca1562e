"""#15: 40 TLS Secrets with ~900 KB chains, and what the controller keeps.

Run from the repository root: ``.venv/bin/python bench/bench_tls_secrets.py``
(``--secrets``, ``--chain-kb`` to change the work). The fake API server and
the real ``platformd ingress`` (with its own nginx) run as child processes;
the controller's ``VmRSS`` is read from /proc:

1. ready with 10 ordinary TLS Ingresses;
2. after ``--secrets`` Secrets with chains of ``--chain-kb`` KB (and one
   Ingress each) were created and a sync ran;
3. after they were deleted again and a sync ran.

It prints those three figures, how many of the big Secrets were refused
(and why) and whether an ordinary TLS host created after them is still served
its own certificate (before the fix, the big chains filled Lua's 32 MB store
and new hosts got the default certificate). ``PYTHONPATH`` may point at
another checkout's package to measure it the same way.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers.certs import served_certificate  # noqa: E402  (after the path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cert_pem(key, name: str, extra: int = 0) -> str:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(datetime.datetime(2025, 1, 1)).not_valid_after(datetime.datetime(2035, 1, 1))
               .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False))
    if extra:
        builder = builder.add_extension(
            x509.UnrecognizedExtension(x509.ObjectIdentifier("1.3.6.1.4.1.99999.1"), os.urandom(extra)),
            critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM).decode()


def key_pem(key) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def secret(name: str, crt: str, key: str) -> dict:
    b64 = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": "default"}, "data": {"tls.crt": b64(crt), "tls.key": b64(key)}}


def ingress(name: str, host: str) -> dict:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": name, "namespace": "default"},
            "spec": {"ingressClassName": "platform", "tls": [{"hosts": [host], "secretName": name}],
                     "rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {
                         "service": {"name": "web", "port": {"number": 80}}}}]}}]}}


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def served_cn(port: int, host: str) -> str:
    cert = x509.load_der_x509_certificate(served_certificate(port, host, timeout=5))
    return cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--secrets", type=int, default=40)
    parser.add_argument("--chain-kb", type=int, default=900)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-tls-"))
    kubeconfig = work / "kubeconfig"
    api = subprocess.Popen([sys.executable, "-m", "tests.fakeapi", "--kubeconfig", str(kubeconfig)], cwd=ROOT,
                           stdout=subprocess.PIPE, text=True)
    api.stdout.readline()
    http, https, health = free_port(), free_port(), free_port()
    controller = None
    from platformd.common import kubeclient

    client = kubeclient.load(str(kubeconfig))

    def create(obj: dict) -> None:
        group = "/apis/networking.k8s.io/v1" if obj["kind"] in ("Ingress", "IngressClass") else "/api/v1"
        plural = {"Ingress": "ingresses", "IngressClass": "ingressclasses", "Secret": "secrets",
                  "Service": "services"}[obj["kind"]]
        ns = "" if obj["kind"] == "IngressClass" else "/namespaces/default"
        kubeclient.request_json(client, "POST", f"{group}{ns}/{plural}", body=obj)

    def delete(plural: str, name: str) -> None:
        group = "/apis/networking.k8s.io/v1" if plural == "ingresses" else "/api/v1"
        kubeclient.request_json(client, "DELETE", f"{group}/namespaces/default/{plural}/{name}")

    try:
        create({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "platform"},
                "spec": {"controller": "k8s.io/platform-ingress"}})
        create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
                "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}})
        for i in range(10):
            key = ec.generate_private_key(ec.SECP256R1())
            create(secret(f"small{i}", cert_pem(key, f"small{i}.example"), key_pem(key)))
            create(ingress(f"small{i}", f"small{i}.example"))
        controller = subprocess.Popen(
            [sys.executable, "-m", "platformd.cli", "ingress", "--kubeconfig", str(kubeconfig),
             "--state-dir", str(work / "state"), "--http-port", str(http), "--https-port", str(https),
             "--healthz-port", str(health), "--healthz-host", "127.0.0.1", "--sync-rate-limit", "10"],
            cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import httpx

        def status() -> dict:
            try:
                return httpx.get(f"http://127.0.0.1:{health}/status", timeout=5).json()
            except (httpx.HTTPError, ValueError):
                return {}

        def settled(since: float, timeout: float = 120.0) -> dict:
            """Wait until a sync after ``since`` was applied and nothing changed for 2 s."""
            deadline = time.monotonic() + timeout
            last, stable_since = None, time.monotonic()
            while time.monotonic() < deadline:
                doc = status()
                key = (doc.get("last_sync_time"), doc.get("config_checksum"), doc.get("last_reload_result"))
                if key != last:
                    last, stable_since = key, time.monotonic()
                elif (doc.get("last_sync_time") or 0) > since and time.monotonic() - stable_since > 2:
                    return doc
                time.sleep(0.2)
            return status()

        settled(0)
        ready = rss_kb(controller.pid)

        big_key = ec.generate_private_key(ec.SECP256R1())
        per_cert = 60_000
        count = max(1, args.chain_kb * 1024 // int(per_cert * 4 / 3))
        started = time.time()
        for i in range(args.secrets):
            chain = cert_pem(big_key, f"big{i}.example") + "".join(
                cert_pem(big_key, f"ca{i}-{j}.example", extra=per_cert) for j in range(count))
            create(secret(f"big{i}", chain, key_pem(big_key)))
            create(ingress(f"big{i}", f"big{i}.example"))
        late_key = ec.generate_private_key(ec.SECP256R1())
        create(secret("late", cert_pem(late_key, "late.example"), key_pem(late_key)))
        create(ingress("late", "late.example"))
        doc = settled(started)
        with_big = rss_kb(controller.pid)
        refused: dict[str, int] = {}
        for p in doc.get("problems", []):
            if p.get("name", "").startswith("big"):
                refused[p["reason"]] = refused.get(p["reason"], 0) + 1
        late_cn = served_cn(https, "late.example")

        started = time.time()
        for i in range(args.secrets):
            delete("secrets", f"big{i}")
            delete("ingresses", f"big{i}")
        settled(started)
        time.sleep(3)
        after = rss_kb(controller.pid)
        print(json.dumps({
            "secrets": args.secrets, "chain_bytes": len(chain), "rss_ready_mb": round(ready / 1024, 1),
            "rss_with_big_secrets_mb": round(with_big / 1024, 1), "rss_after_delete_mb": round(after / 1024, 1),
            "refused_big_secrets_by_reason": refused, "late_host_certificate_cn": late_cn,
            "last_reload_result": doc.get("last_reload_result"),
        }, indent=2))
        return 0
    finally:
        if controller is not None:
            controller.terminate()
            controller.wait(30)
        api.terminate()
        api.wait(10)


if __name__ == "__main__":
    sys.exit(main())
