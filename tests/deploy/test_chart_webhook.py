"""The chart's admission webhook (ingress.admissionWebhook), rendered by the real Helm binary.

Off by default. On, it renders the ValidatingWebhookConfiguration, the
webhook's own Service, an empty certificate Secret (or cert-manager's
Issuer and Certificate), RBAC by name and, optionally, a NetworkPolicy; the
controller gets the flags that name exactly those objects. The last test
loads the rendered objects into the RBAC-enforcing fake API server and runs
the real certificate keeper as the chart's ServiceAccount with the chart's
flags: the Secret is filled and the caBundle injected with nothing refused,
and nothing beyond those two objects is writable.
"""

from __future__ import annotations

import base64

import kubernetes_validate
import pytest

from platformd.common import errors, kubeclient
from platformd.ingress import main as ingress_main
from platformd.ingress import webhook_certs as certs
from tests.fakeapi import FakeApiServer

from . import helmtool
from .helmtool import by_kind, container, one, parse_args, workload
from .test_chart import KUBE_VERSIONS

ON = "ingress.admissionWebhook.enabled=true"
CERT_MANAGER = "ingress.admissionWebhook.certManager.enabled=true"
NS = helmtool.NAMESPACE
CERT_MANAGER_KINDS = {"Issuer", "Certificate"}  # CRDs: no schema in kubernetes-validate


def render(helm, *sets: str) -> list[dict]:
    return helm.template(values=[helmtool.scenarios()["ingress-only"]], sets=list(sets))


def controller_flags(docs) -> dict:
    return parse_args(container(workload(docs, "ingress-controller"))["args"])


def webhook_objects(docs) -> list[dict]:
    return [d for d in docs if "webhook" in d["metadata"]["name"]]


def test_off_by_default(helm):
    docs = render(helm)
    assert webhook_objects(docs) == [] and not by_kind(docs, "ValidatingWebhookConfiguration")
    assert not any(flag.startswith("webhook") or flag == "validating-webhook" for flag in controller_flags(docs))


@pytest.mark.parametrize("sets", [(ON,), (ON, CERT_MANAGER),
                                  (ON, "ingress.admissionWebhook.networkPolicy.enabled=true",
                                   "ingress.admissionWebhook.networkPolicy.from[0].ipBlock.cidr=10.0.0.10/32")])
def test_lints_strict(helm, sets):
    helm.lint(helmtool.CHART, values=[helmtool.scenarios()["ingress-only"]], sets=list(sets))


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("sets", [(ON,), (ON, CERT_MANAGER)])
def test_rendered_objects_match_kubernetes_schemas(helm, kube_version, sets):
    docs = helm.template(values=[helmtool.scenarios()["ingress-only"]], sets=list(sets), kube_version=kube_version)
    for doc in docs:
        if doc["kind"] in CERT_MANAGER_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {exc.message} at {list(exc.path)}")


def test_flags_name_the_rendered_objects_and_parse(helm):
    docs = render(helm, ON)
    flags = controller_flags(docs)
    service = one(docs, "Service", flags["webhook-service"].split("/")[1])
    secret = one(docs, "Secret", flags["webhook-secret"].split("/")[1])
    config = one(docs, "ValidatingWebhookConfiguration", flags["webhook-configuration"])
    assert secret["type"] == "kubernetes.io/tls" and secret["data"] == {"tls.crt": "", "tls.key": ""}
    hook = config["webhooks"][0]
    assert hook["clientConfig"]["service"] == {"namespace": NS, "name": service["metadata"]["name"],
                                               "path": "/validate", "port": service["spec"]["ports"][0]["port"]}
    assert "caBundle" not in hook["clientConfig"]  # the controller's to fill; an upgrade must not clear it
    assert (hook["admissionReviewVersions"], hook["sideEffects"], hook["matchPolicy"]) == (["v1"], "None", "Equivalent")
    assert hook["rules"][0]["resources"] == ["ingresses"] and hook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert hook["rules"][1]["apiGroups"] == ["gateway.networking.k8s.io"]  # routes: webhook_routes
    assert hook["rules"][1]["resources"] == ["httproutes", "grpcroutes"]
    off = one(render(helm, ON, "ingress.gatewayAPI.enabled=false"), "ValidatingWebhookConfiguration")
    assert [r["resources"] for r in off["webhooks"][0]["rules"]] == [["ingresses"]]
    ports = {p["name"]: p["containerPort"] for p in container(workload(docs, "ingress-controller"))["ports"]}
    assert service["spec"]["ports"][0]["targetPort"] == "webhook" and flags["validating-webhook"] == f":{ports['webhook']}"
    args = container(workload(docs, "ingress-controller"))["args"]
    parsed = ingress_main.build_parser().parse_args([a for a in args if not a.startswith(
        ("--role", "--state-dir", "--log-format"))])
    assert parsed.validating_webhook == ":8443" and parsed.webhook_configuration == config["metadata"]["name"]


def test_failure_policy_and_selectors_are_configurable(helm):
    docs = render(helm, ON, "ingress.admissionWebhook.failurePolicy=Ignore",
                  "ingress.admissionWebhook.namespaceSelector.matchLabels.team=a",
                  "ingress.admissionWebhook.operations={CREATE,UPDATE,DELETE}",
                  "ingress.admissionWebhook.timeoutSeconds=5")
    hook = one(docs, "ValidatingWebhookConfiguration")["webhooks"][0]
    assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] == 5
    assert hook["namespaceSelector"] == {"matchLabels": {"team": "a"}}
    assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE", "DELETE"]


@pytest.mark.parametrize("bad", ["ingress.admissionWebhook.failurePolicy=Maybe",
                                 "ingress.admissionWebhook.timeoutSeconds=60",
                                 "ingress.admissionWebhook.operations={CONNECT}",
                                 "ingress.admissionWebhook.certManager.issuer=x"])
def test_bad_values_are_refused(helm, bad):
    with pytest.raises(helmtool.HelmError):
        render(helm, ON, bad)


def test_rbac_is_by_name_only(helm):
    docs = render(helm, ON)
    flags = controller_flags(docs)
    role = one(docs, "Role", "edge-ingress-webhook")
    cluster_role = one(docs, "ClusterRole", "edge-ingress-webhook")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "update"],
                              "resourceNames": [flags["webhook-secret"].split("/")[1]]}]
    assert cluster_role["rules"] == [{"apiGroups": ["admissionregistration.k8s.io"],
                                      "resources": ["validatingwebhookconfigurations"], "verbs": ["get", "update"],
                                      "resourceNames": [flags["webhook-configuration"]]}]
    sa = workload(docs, "ingress-controller")["spec"]["template"]["spec"]["serviceAccountName"]
    for binding in (one(docs, "RoleBinding", "edge-ingress-webhook"), one(docs, "ClusterRoleBinding", "edge-ingress-webhook")):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NS}]


def test_cert_manager_mode_renders_a_certificate_and_needs_less(helm):
    docs = render(helm, ON, CERT_MANAGER)
    flags = controller_flags(docs)
    assert flags["webhook-cert-manager"] is True and "webhook-configuration" not in flags
    certificate = one(docs, "Certificate")
    service = flags["webhook-service"].split("/")[1]
    assert certificate["spec"]["secretName"] == flags["webhook-secret"].split("/")[1]
    assert certificate["spec"]["dnsNames"] == list(certs.service_names(NS, service)[:2])
    assert certificate["spec"]["issuerRef"] == {"kind": "Issuer", "name": one(docs, "Issuer")["metadata"]["name"]}
    config = one(docs, "ValidatingWebhookConfiguration")
    assert config["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": f"{NS}/{certificate['metadata']['name']}"}
    assert not [d for d in docs if d["kind"] == "Secret" and "webhook" in d["metadata"]["name"]]
    assert one(docs, "Role", "edge-ingress-webhook")["rules"][0]["verbs"] == ["get"]
    assert not [d for d in by_kind(docs, "ClusterRole") if "webhook" in d["metadata"]["name"]]


def test_cert_manager_with_an_issuer_of_ones_own(helm):
    docs = render(helm, ON, CERT_MANAGER, "ingress.admissionWebhook.certManager.issuerRef.kind=ClusterIssuer",
                  "ingress.admissionWebhook.certManager.issuerRef.name=corp-ca")
    assert not by_kind(docs, "Issuer")
    assert one(docs, "Certificate")["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "corp-ca"}


def test_network_policy_narrows_only_the_webhook_port(helm):
    peer = "ingress.admissionWebhook.networkPolicy.from[0].ipBlock.cidr=10.0.0.10/32"
    docs = render(helm, ON, "ingress.admissionWebhook.networkPolicy.enabled=true", peer)
    policy = one(docs, "NetworkPolicy")
    open_rule, webhook_rule = policy["spec"]["ingress"]
    assert "from" not in open_rule and {p["port"] for p in open_rule["ports"]} == {"http", "https", "metrics"}
    assert webhook_rule == {"ports": [{"port": "webhook", "protocol": "TCP"}],
                            "from": [{"ipBlock": {"cidr": "10.0.0.10/32"}}]}
    pod_labels = workload(docs, "ingress-controller")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    with pytest.raises(helmtool.HelmError, match="networkPolicy.from"):
        render(helm, ON, "ingress.admissionWebhook.networkPolicy.enabled=true")


def test_the_keeper_works_with_exactly_the_charts_rbac(helm, tmp_path):
    docs = render(helm, ON)
    flags = controller_flags(docs)
    srv = FakeApiServer(rbac=True).start()
    try:
        srv.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        for doc in webhook_objects(docs) + by_kind(docs, "ServiceAccount"):
            if doc["kind"] not in ("Service",):
                srv.create(doc)
        srv.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "unrelated", "namespace": NS},
                    "data": {"password": "c2VjcmV0"}})
        sa = workload(docs, "ingress-controller")["spec"]["template"]["spec"]["serviceAccountName"]
        srv.add_service_account_token("t", NS, sa)
        api = kubeclient.load(srv.write_kubeconfig(tmp_path / "sa.kubeconfig", token="t", namespace=NS))
        keeper = certs.CertificateKeeper(api, certs.KeeperOptions(
            secret=flags["webhook-secret"], service=flags["webhook-service"],
            configuration=flags["webhook-configuration"]))
        made = keeper.sync()
        assert keeper.sync() == made  # reused, not remade
        config = srv.get("ValidatingWebhookConfiguration", None, flags["webhook-configuration"])
        assert config["webhooks"][0]["clientConfig"]["caBundle"] == base64.b64encode(made.ca_cert).decode()
        assert srv.denied_requests == []
        with pytest.raises(errors.AccessDenied):  # by name: other Secrets stay out of reach
            kubeclient.request_json(api, "PUT", f"/api/v1/namespaces/{NS}/secrets/unrelated", body={
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "unrelated", "namespace": NS}})
    finally:
        srv.stop()
