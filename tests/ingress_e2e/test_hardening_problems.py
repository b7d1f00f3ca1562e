"""#15 end to end: refused objects never block the others and are visible.

Real nginx + Lua, the fake API server (or the file source), backends in
network namespaces. Reproductions: a use-regex path ``/(?<host>.*)`` failed
``nginx -t`` for everyone (another tenant's new denylist not enforced); a
canary pattern ``(?a)x`` made Lua refuse the whole backends section (another
tenant's EndpointSlice move not applied); ``$hostX`` as log format failed
``nginx -t``; the culprits got a Normal Event, /status showed nothing.
"""

from __future__ import annotations

import re

from platformd.ctl import render_status_table
from tests.ingress_e2e import objects as o
from tests.ingress_e2e.conftest import wait_for

REFUSED = {
    # name: (annotations, path, pathType, expected reason)
    "regex-host": ({"use-regex": "true"}, "/(?<host>.*)", "ImplementationSpecific"),
    "regex-request-id": ({"use-regex": "true"}, "/(?<request_id>.*)", "ImplementationSpecific"),
    "regex-escape": ({"use-regex": "true"}, "/\\u0041", "ImplementationSpecific"),
    "regex-long-name": ({"use-regex": "true"}, "/(?<" + "n" * 33 + ">x)", "ImplementationSpecific"),
    "canary-ascii": ({"canary": "true", "canary-by-header": "X-Canary", "canary-by-header-pattern": "(?a)x"},
                     "/", "Prefix"),
    "cookie-path": ({"affinity": "cookie", "session-cookie-path": "/" + "p" * 65535}, "/", "Prefix"),
}


def _warnings(fake_api, name: str) -> list[dict]:
    return [e for e in fake_api.list_objects("events", "default")
            if e.get("involvedObject", {}).get("name") == name and e.get("type") == "Warning"]


def _normal_syncs(fake_api, name: str) -> list[dict]:
    return [e for e in fake_api.list_objects("events", "default")
            if e.get("involvedObject", {}).get("name") == name and e.get("reason") == "Sync"]


def _metric(text: str, kind: str, reason: str) -> float | None:
    for line in text.splitlines():
        if line.startswith("nginx_ingress_controller_problems{") and f'kind="{kind}"' in line \
                and f'reason="{reason}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def test_refused_objects_are_reported_and_never_block_other_tenants(fake_api, ingress_controller, netns_backends):
    backends = netns_backends(["web", "moved", "other"])
    fake_api.create(o.ingress_class())
    for svc in ("web", "other"):
        fake_api.create(o.service(svc))
        fake_api.create(o.endpoint_slice(svc, [backends[svc].ip]))
    fake_api.create(o.ingress("good", "good.example", [("/", "web", 80)]))
    for name, (annotations, path, path_type) in REFUSED.items():
        fake_api.create(o.ingress(name, f"{name}.example", [(path, "web", 80, path_type)],
                                  annotations=annotations))
    fake_api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "default"},
                     "data": {"log-format-upstream": "$hostX"}})
    running = ingress_controller("--configmap", "default/cfg")
    running.wait_ready()
    assert running.get("/", host="good.example").text == "web"

    # Every refused object is in /status with its reason, and gets a Warning Event.
    def refused_names():
        return {p["name"] for p in running.status().get("problems", [])}

    wait_for(lambda: set(REFUSED) | {"cfg"} <= refused_names(), 15, message="problems in /status")
    status = running.status()
    by_name = {p["name"]: p for p in status["problems"]}
    assert "nginx variable" in by_name["regex-host"]["message"]
    assert "ngx.re" in by_name["canary-ascii"]["message"]
    assert "$hostX" in by_name["cfg"]["message"] and by_name["cfg"]["kind"] == "ConfigMap"
    assert status["problems_total"] == len(status["problems"])
    wait_for(lambda: all(_warnings(fake_api, name) for name in REFUSED), 15, message="Warning events")
    assert all(not _normal_syncs(fake_api, name) for name in REFUSED)
    assert status["last_reload_result"] == "ok"

    # A metric per reason, agreeing with /status.
    metrics = running.internal("/metrics").text
    assert _metric(metrics, "Ingress", "InvalidAnnotation") == sum(
        1 for p in status["problems"] if p["kind"] == "Ingress" and p["reason"] == "InvalidAnnotation")
    assert _metric(metrics, "ConfigMap", "InvalidConfigValue") == 1

    # platformctl status shows them.
    table = render_status_table({"components": {"ingress": {"healthy": True, "status": status}}})
    assert "refused objects:" in table and "regex-host" in table

    # Other tenants' changes keep flowing: a new denylist is enforced at once,
    # an EndpointSlice move is applied (the canary pattern no longer fails Lua).
    fake_api.create(o.ingress("later", "later.example", [("/", "other", 80)],
                              annotations={"denylist-source-range": "127.0.0.1/32"}))
    wait_for(lambda: running.get("/", host="later.example").status_code == 403, 15, message="denylist enforced")
    fake_api.update(o.endpoint_slice("web", [backends["moved"].ip]))
    running.wait_served("good.example", "/", "moved", timeout=15)

    # Fixing an object clears its problem.
    fake_api.delete("ingresses", "default", "regex-host")
    wait_for(lambda: "regex-host" not in refused_names(), 15, message="problem cleared")


def test_file_source_problems_are_in_status(tmp_path, ingress_controller):
    (tmp_path / "class.yaml").write_text(
        "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: platform}\n"
        "spec: {controller: k8s.io/platform-ingress}\n")
    (tmp_path / "typed.yaml").write_text(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: bad}\nspec: {rules: [x]}\n")
    (tmp_path / "broken.yaml").write_text("apiVersion: v1\nkind: Service\nmetadata: {name: [\n")
    running = ingress_controller(source=str(tmp_path), api=False)
    running.wait_ready()
    problems = {p["name"]: p for p in running.status()["problems"] if p["kind"] == "File"}
    assert set(problems) == {str(tmp_path / "typed.yaml"), str(tmp_path / "broken.yaml")}
    assert re.search(r"spec\.rules\[0\]: must be an object", problems[str(tmp_path / "typed.yaml")]["message"])
    assert all(p["reason"] == "InvalidManifest" for p in problems.values())
    assert _metric(running.internal("/metrics").text, "File", "InvalidManifest") == 2


def test_external_name_to_loopback_does_not_expose_status(fake_api, ingress_controller):
    """externalName 127.0.0.1 on the internal port published /status on the public port."""
    running = ingress_controller()
    fake_api.create(o.ingress_class())
    fake_api.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "peek", "namespace": "default"},
                     "spec": {"type": "ExternalName", "externalName": "127.0.0.1",
                              "ports": [{"name": "http", "port": running.healthz_port, "protocol": "TCP"}]}})
    fake_api.create(o.ingress("peek", "peek.example", [("/status", "peek", running.healthz_port)]))
    running.wait_ready()
    wait_for(lambda: any(p["name"] == "peek" and p["reason"] == "ExternalNameRefused"
                         for p in running.status()["problems"]), 15, message="ExternalNameRefused problem")
    response = running.get("/status", host="peek.example")
    assert response.status_code == 503
    assert "config_checksum" not in response.text


def test_another_local_user_cannot_reprogram_the_data_plane(fake_api, ingress_controller, netns_backends):
    """`runuser -u nobody -- curl --unix-socket … -X POST …/configuration/backends` moved a host."""
    import os
    import shutil
    import subprocess

    import pytest

    from platformd.ingress.layout import NginxFiles

    if os.geteuid() != 0 or not shutil.which("runuser") or not shutil.which("curl"):
        pytest.skip("needs root, runuser and curl")
    backends = netns_backends(["web"])
    fake_api.create(o.ingress_class())
    fake_api.create(o.service("web"))
    fake_api.create(o.endpoint_slice("web", [backends["web"].ip]))
    fake_api.create(o.ingress("good", "good.example", [("/", "web", 80)]))
    running = ingress_controller()
    running.wait_ready()
    os.chmod(running.state_dir, 0o755)  # as the issue found it: state directories 0755
    socket = NginxFiles(running.state_dir).socket
    attempt = subprocess.run(
        ["runuser", "-u", "nobody", "--", "curl", "-sS", "--max-time", "5", "--unix-socket", str(socket),
         "-X", "POST", "http://nginx/configuration/backends", "-d", "[]"],
        capture_output=True, text=True)
    assert attempt.returncode != 0, attempt.stdout
    assert "Permission denied" in attempt.stderr or "Couldn't connect" in attempt.stderr
    assert running.get("/", host="good.example").text == "web"


def test_a_foreign_change_to_the_data_plane_is_repaired(fake_api, ingress_controller, netns_backends):
    """#15: a write to the configuration socket that did not come from the
    controller moved a host to another backend and went unnoticed for 20+ s.
    The controller reads Lua's checksums back and pushes its own state again."""
    import httpx

    from platformd.ingress.layout import NginxFiles

    backends = netns_backends(["web", "other"])
    fake_api.create(o.ingress_class())
    for name in ("web", "other"):
        fake_api.create(o.service(name))
        fake_api.create(o.endpoint_slice(name, [backends[name].ip]))
    fake_api.create(o.ingress("good", "good.example", [("/", "web", 80)]))
    running = ingress_controller()
    running.wait_ready()
    assert running.get("/", host="good.example").text == "web"

    # Whoever may reach the socket (here: root, the controller's own user)
    # points good.example's backend at the other pod.
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(NginxFiles(running.state_dir).socket))) as lua:
        section = lua.get("http://nginx/configuration/backends").json()
        hijacked = [dict(b, endpoints=[dict(e, address=backends["other"].ip) for e in b["endpoints"]])
                    if b["name"].startswith("default.web.") else b for b in section["data"]]
        assert lua.post("http://nginx/configuration/backends",
                        json={"checksum": "f" * 64, "data": hijacked}).status_code == 201
    wait_for(lambda: running.get("/", host="good.example").text == "other", 5, message="the foreign change applied")
    wait_for(lambda: running.get("/", host="good.example").text == "web", 10, message="the controller repaired it")
