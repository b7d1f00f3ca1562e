"""The webhook's HTTPS server, called as the API server calls it: real TLS, real AdmissionReview bodies."""

from __future__ import annotations

import datetime
import json
import socket
import ssl
import time

import httpx
import pytest
from prometheus_client import CollectorRegistry

from platformd.ingress import webhook_admission as admission
from platformd.ingress import webhook_certs as certs
from platformd.ingress.webhook_server import REVIEW_PATH, WebhookMetrics, WebhookServer, parse_address
from tests.ingress.test_translate_fixtures import ingress, path, rule
from tests.ingress.test_webhook_review import NEWER, OLDER, Cluster, web_ingress

NAMES = ("localhost", *certs.service_names("platform", "webhook"))


def issued(now: datetime.datetime | None = None) -> certs.Issued:
    return certs.issue(NAMES, now or datetime.datetime.now(datetime.timezone.utc))


class Running:
    def __init__(self, cluster: Cluster, clock=time.time) -> None:
        self.issued = issued()
        self.registry = CollectorRegistry()
        self.server = WebhookServer("127.0.0.1", 0, {("networking.k8s.io", "Ingress"): cluster.reviewer},
                                    (self.issued.cert, self.issued.key), clock=clock,
                                    metrics=WebhookMetrics(self.registry))
        self.server.start()
        self.client = self.client_for(self.issued)

    def client_for(self, made: certs.Issued) -> httpx.Client:
        context = ssl.create_default_context(cadata=made.ca_cert.decode())
        return httpx.Client(base_url=f"https://localhost:{self.server.port}", verify=context, timeout=5)

    def post(self, body: dict | bytes, **kw) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.client.post(REVIEW_PATH + "?timeout=10s", content=content,
                                headers={"Content-Type": "application/json"}, **kw)

    def raw(self, request: bytes) -> bytes:
        """One request on a fresh TLS connection; the whole answer."""
        context = ssl.create_default_context(cadata=self.issued.ca_cert.decode())
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=5) as sock:
            with context.wrap_socket(sock, server_hostname="localhost") as tls:
                tls.sendall(request)
                chunks = []
                while chunk := tls.recv(65536):
                    chunks.append(chunk)
                    if b"\r\n\r\n" in b"".join(chunks) and b"Connection: close" in b"".join(chunks):
                        break
                return b"".join(chunks)

    def stop(self) -> None:
        self.client.close()
        self.server.stop()


@pytest.fixture
def webhook():
    started: list[Running] = []

    def start(*ingresses: dict, **kw) -> Running:
        started.append(Running(Cluster(*ingresses), **kw))
        return started[-1]

    yield start
    for running in started:
        running.stop()


def review(obj: dict | None, operation: str = "CREATE", old: dict | None = None, **extra) -> dict:
    meta = (obj or old)["metadata"]
    request = {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
               "kind": {"group": "networking.k8s.io", "version": "v1", "kind": "Ingress"},
               "resource": {"group": "networking.k8s.io", "version": "v1", "resource": "ingresses"},
               "requestKind": {"group": "networking.k8s.io", "version": "v1", "kind": "Ingress"},
               "name": meta["name"], "namespace": meta["namespace"], "operation": operation,
               "userInfo": {"username": "admin", "groups": ["system:authenticated"]},
               "object": obj, "oldObject": old, "dryRun": False,
               "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}
    request.update(extra)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def answer(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    doc = response.json()
    assert (doc["apiVersion"], doc["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert doc["response"]["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    return doc["response"]


def test_valid_ingress_is_allowed(webhook):
    got = answer(webhook().post(review(web_ingress("a"))))
    assert got == {"uid": got["uid"], "allowed": True}


def test_invalid_annotation_is_denied_with_status_400(webhook):
    got = answer(webhook().post(review(web_ingress("a", annotations={"proxy-body-size": "1m; evil"}))))
    assert got["allowed"] is False
    assert got["status"]["code"] == 400 and "proxy-body-size" in got["status"]["message"]


def test_conflicting_host_and_path_is_denied(webhook):
    running = webhook(web_ingress("old", created=OLDER))
    got = answer(running.post(review(web_ingress("new", created=NEWER))))
    assert got["allowed"] is False and "default/old" in got["status"]["message"]


def test_dry_run_gets_the_same_verdict(webhook):
    running = webhook(web_ingress("old", created=OLDER))
    got = answer(running.post(review(web_ingress("new", created=NEWER), dryRun=True)))
    assert got["allowed"] is False


def test_warnings_reach_the_client(webhook):
    obj = ingress("a", rules=[rule("example.com", path("/app", service="not-yet"))], created=NEWER)
    got = answer(webhook().post(review(obj)))
    assert got["allowed"] is True and got["warnings"]


def test_delete_is_allowed(webhook):
    obj = web_ingress("a")
    got = answer(webhook(obj).post(review(None, "DELETE", old=obj)))
    assert got["allowed"] is True


@pytest.mark.parametrize("body, status, text", [
    (b"{not json", 400, "not JSON"),
    (b"[]", 400, "not a JSON object"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}).encode(), 400, "apiVersion"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(), 400, "request"),
])
def test_malformed_review_without_a_uid_is_http_400(webhook, body, status, text):
    response = webhook().post(body)
    assert response.status_code == status and text in response.text


@pytest.mark.parametrize("change, text", [
    ({"operation": "PATCH"}, "request.operation"),
    ({"object": "a string"}, "request.object"),
    ({"object": None}, "request.object is required"),
    ({"kind": "Ingress"}, "request.kind"),
    ({"dryRun": "yes"}, "request.dryRun"),
])
def test_malformed_review_with_a_uid_is_denied_saying_why(webhook, change, text):
    got = answer(webhook().post(review(web_ingress("a"), **change)))
    assert got["allowed"] is False and text in got["status"]["message"]


def test_omitted_or_null_optional_fields_are_accepted(webhook):
    body = review(web_ingress("a"), subResource=None, dryRun=False)
    del body["request"]["options"]
    assert answer(webhook().post(body))["allowed"] is True


def test_unknown_kind_is_allowed_with_a_warning(webhook):
    body = review(web_ingress("a"), kind={"group": "gateway.networking.k8s.io", "version": "v1", "kind": "HTTPRoute"})
    got = answer(webhook().post(body))
    assert got["allowed"] is True and "HTTPRoute" in got["warnings"][0]


def test_other_version_is_denied_asking_for_match_policy_equivalent(webhook):
    body = review(web_ingress("a"), kind={"group": "networking.k8s.io", "version": "v1beta1", "kind": "Ingress"})
    got = answer(webhook().post(body))
    assert got["allowed"] is False and "Equivalent" in got["status"]["message"]


def test_oversize_body_is_refused_unread(webhook):
    running = webhook()
    head = (f"POST {REVIEW_PATH} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {admission.MAX_BODY + 1}\r\n\r\n").encode()
    reply = running.raw(head)
    assert reply.startswith(b"HTTP/1.1 413")


def test_body_without_length_is_refused(webhook):
    reply = webhook().raw(f"POST {REVIEW_PATH} HTTP/1.1\r\nHost: localhost\r\n"
                          "Content-Type: application/json\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 411")


def test_other_content_type_is_refused(webhook):
    response = webhook().client.post(REVIEW_PATH, content=b"{}", headers={"Content-Type": "text/plain"})
    assert response.status_code == 415


def test_one_connection_serves_many_reviews(webhook):
    running = webhook()
    seen: list[str] = []
    for n in range(3):
        response = running.post(review(web_ingress(f"a{n}")),
                                extensions={"trace": lambda name, info: seen.append(name)})
        assert answer(response)["allowed"]
    assert seen.count("connection.connect_tcp.started") == 1


def test_a_reviewer_that_fails_gives_http_500_and_the_server_goes_on(webhook, monkeypatch):
    running = webhook()
    reviewer = running.server._reviewers[("networking.k8s.io", "Ingress")]
    monkeypatch.setattr(reviewer, "review", lambda request: 1 / 0)
    assert running.post(review(web_ingress("a"))).status_code == 500
    monkeypatch.undo()
    assert answer(running.post(review(web_ingress("a"))))["allowed"]


def test_plain_http_on_the_tls_port_does_not_stop_the_server(webhook):
    running = webhook()
    with pytest.raises(httpx.HTTPError):
        httpx.post(f"http://127.0.0.1:{running.server.port}{REVIEW_PATH}", content=b"{}", timeout=2)
    assert answer(running.post(review(web_ingress("a"))))["allowed"]


def test_health_and_a_certificate_swap(webhook):
    now = [time.time()]
    running = webhook(clock=lambda: now[0])
    assert running.client.get("/healthz").status_code == 200
    fresh = issued()
    running.server.use_certificate(fresh.cert, fresh.key)
    with running.client_for(fresh) as client:
        assert client.get("/healthz").status_code == 200
    with running.client_for(running.issued) as old_trust, pytest.raises(httpx.ConnectError):
        old_trust.get("/healthz")
    now[0] += certs.SERVING_VALIDITY.total_seconds() + 3600
    assert running.server.health() == (False, "admission webhook: serving certificate has expired")


def test_a_bad_certificate_pair_is_refused_and_the_old_one_kept(webhook):
    running = webhook()
    with pytest.raises(ssl.SSLError):
        running.server.use_certificate(issued().cert, running.issued.key)
    assert running.client.get("/healthz").status_code == 200


@pytest.mark.parametrize("text, expected", [
    (":8443", ("", 8443)), ("0.0.0.0:9443", ("0.0.0.0", 9443)), ("[::1]:8443", ("::1", 8443)),
])
def test_parse_address(text, expected):
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["8443", "host:", ":0", ":70000", "x:y"])
def test_parse_address_refuses(text):
    with pytest.raises(ValueError):
        parse_address(text)


def test_warnings_are_cut_to_what_the_api_server_keeps():
    body = admission.response_body("u", admission.Verdict(warnings=("x" * 1000, *("w\nnewline",) * 500)))
    warnings = json.loads(body)["response"]["warnings"]
    assert len(warnings[0]) == admission.WARNING_LENGTH and "\n" not in "".join(warnings)
    assert sum(map(len, warnings)) <= admission.WARNINGS_TOTAL + 40 and warnings[-1].endswith("not shown")


def test_reviews_are_counted_and_timed(webhook):
    running = webhook(web_ingress("old", created=OLDER))
    running.post(review(web_ingress("fine", p="/fine")))
    running.post(review(web_ingress("new", created=NEWER)))
    running.post(b"{not json")
    running.post(review(web_ingress("a"), kind={"group": "x.io", "version": "v1", "kind": "Anything"}))

    def count(kind, result):
        return running.registry.get_sample_value("nginx_ingress_controller_admission_reviews_total",
                                                 {"kind": kind, "result": result})

    assert (count("Ingress", "allowed"), count("Ingress", "denied"), count("", "malformed"),
            count("other", "unreviewed")) == (1, 1, 1, 1)
    assert running.registry.get_sample_value("nginx_ingress_controller_admission_review_duration_seconds_count") == 4
