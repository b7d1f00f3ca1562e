"""The Helm chart, rendered by the real Helm v3 binary.

Every scenario under deploy/helm/platform/ci/ is linted with --strict,
rendered, and each rendered object validated against the Kubernetes OpenAPI
schemas (strict: unknown fields fail) for the oldest and newest Kubernetes
versions the chart claims to support. The remaining tests pin down what each
scenario must contain: the contract between the chart and platformd.
"""

from __future__ import annotations

import re

import kubernetes_validate
import pytest
import yaml

from . import helmtool
from .helmtool import by_kind, container, one, parse_args, workload

SCENARIOS = sorted(helmtool.scenarios())
# The chart's kubeVersion floor (Chart.yaml) and the newest schemas
# kubernetes-validate ships.
KUBE_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]

INGRESS = "ingress-controller"
NODEPROXY = "node-proxy"

# The flags the chart may pass: platformd's own (platformd.supervise) and the
# two programs' (docs/deploy.md). test_entrypoint.py checks them against the
# real parsers as well.
PLATFORMD_FLAGS = {"state-dir", "log-format", "health-address", "health-port", "healthz-port"}
INGRESS_FLAGS = PLATFORMD_FLAGS | {
    "kubeconfig", "source", "watch-namespace", "ingress-class", "controller-class",
    "watch-ingress-without-class", "http-port", "https-port", "healthz-port",
    "publish-service", "publish-status-address", "update-status-on-shutdown",
    "election-id", "default-ssl-certificate", "default-backend-service", "configmap",
    "sync-rate-limit", "allow-snippet-annotations", "enable-ssl-passthrough",
}
NODEPROXY_FLAGS = PLATFORMD_FLAGS | {
    "kubeconfig", "hostname", "node-ip", "proxy-mode", "dual-stack", "cluster-cidr", "masquerade-all", "scheduler",
    "min-sync-period", "sync-period", "strict-arp", "healthz-bind-address",
    "metrics-bind-address",
}


def test_helm_binary_is_helm_v3(helm):
    assert re.match(r"v3\.\d+\.\d+", helm.version()), helm.version()


def test_validated_versions_start_at_the_charts_floor():
    for chart in (helmtool.CHART, *sorted((helmtool.CHART / "charts").iterdir())):
        meta = yaml.safe_load((chart / "Chart.yaml").read_text())
        assert meta["kubeVersion"] == f">={KUBE_VERSIONS[0]}-0", chart


def test_scenarios_cover_every_combination():
    assert {"ingress-only", "nodeproxy-only", "both", "ingress-daemonset-nodeport"} <= set(SCENARIOS)


def test_chart_versions_follow_the_package_version():
    import tomllib

    package = tomllib.loads((helmtool.REPO / "pyproject.toml").read_text())["project"]["version"]
    charts = [helmtool.CHART, helmtool.CHART / "charts" / "ingress", helmtool.CHART / "charts" / "nodeproxy"]
    for chart in charts:
        meta = yaml.safe_load((chart / "Chart.yaml").read_text())
        assert (meta["version"], meta["appVersion"]) == (package, package), chart
    deps = yaml.safe_load((helmtool.CHART / "Chart.yaml").read_text())["dependencies"]
    assert {d["name"]: d["condition"] for d in deps} == {
        "ingress": "ingress.enabled", "nodeproxy": "nodeproxy.enabled"}


# --- lint and schema validation ----------------------------------------------

@pytest.mark.parametrize("scenario", SCENARIOS)
def test_lint_strict(helm, scenario):
    helm.lint(helmtool.CHART, values=[helmtool.scenarios()[scenario]])


@pytest.mark.parametrize("subchart", ["ingress", "nodeproxy"])
def test_subchart_lints_on_its_own(helm, subchart):
    helm.lint(helmtool.CHART / "charts" / subchart)


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rendered_objects_match_kubernetes_schemas(helm, scenario, kube_version):
    docs = helm.template(values=[helmtool.scenarios()[scenario]], kube_version=kube_version)
    assert docs
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} invalid for {kube_version}: "
                        f"{exc.message} at {list(exc.path)}")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rendering_is_deterministic(helm, rendered, scenario):
    again = helm.template(values=[helmtool.scenarios()[scenario]])
    assert again == rendered(scenario)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_namespaced_objects_go_to_the_release_namespace(rendered, scenario):
    """...except the Roles that grant access to the watched namespace (rbac.scope namespace)."""
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "IngressClass"}
    for doc in rendered(scenario):
        if doc["kind"] in cluster_scoped:
            assert "namespace" not in doc["metadata"], doc["kind"]
        elif doc["kind"] in ("Role", "RoleBinding") and doc["metadata"]["name"].endswith("-watched"):
            assert doc["metadata"]["namespace"] == "team-a", doc["metadata"]["name"]
        else:
            assert doc["metadata"]["namespace"] == helmtool.NAMESPACE, doc["kind"]


def test_the_health_server_address_is_offered_and_the_port_kept(rendered):
    docs = rendered("ingress-namespaced")
    container = helmtool.workload(docs, "ingress-controller")["spec"]["template"]["spec"]["containers"][0]
    assert "--health-address=$(POD_IP)" in container["args"]
    assert "--healthz-port=10254" in container["args"]
    assert any(e["name"] == "POD_IP" for e in container["env"])
    default = helmtool.workload(rendered("ingress-only"), "ingress-controller")["spec"]["template"]["spec"]
    assert not any(a.startswith("--health-address") for a in default["containers"][0]["args"])


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_selectors_match_their_pods(rendered, scenario):
    """What the API server checks and the schemas cannot: selectors select the pods."""
    docs = rendered(scenario)
    for work in helmtool.workloads(docs):
        selector = work["spec"]["selector"]["matchLabels"]
        labels = work["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), work["metadata"]["name"]
    pods = [w["spec"]["template"]["metadata"]["labels"] for w in helmtool.workloads(docs)]
    for obj in by_kind(docs, "Service") + by_kind(docs, "PodDisruptionBudget"):
        selector = obj["spec"]["selector"]
        selector = selector.get("matchLabels", selector)
        assert sum(selector.items() <= labels.items() for labels in pods) == 1, obj["metadata"]["name"]


def test_nothing_enabled_fails_with_a_clear_message(helm):
    with pytest.raises(helmtool.HelmError, match="nothing to install"):
        helm.template(sets=["ingress.enabled=false", "nodeproxy.enabled=false"])


@pytest.mark.parametrize("bad", [
    "ingress.kind=StatefulSet",
    "ingress.service.type=ExternalName",
    "ingress.replicas=3",            # a typo of replicaCount must not pass silently
    "nodeproxy.scheduler=fastest",
    "nodeproxy.proxyMode=iptables",
    "nodeproxy.healthzBindAddress=10256",
])
def test_values_schema_rejects(helm, bad):
    with pytest.raises(helmtool.HelmError, match="schema"):
        helm.template(sets=["nodeproxy.enabled=true", bad])


# --- which parts each scenario renders ---------------------------------------

def components(docs):
    return sorted({helmtool.component_of(w) for w in helmtool.workloads(docs)})


@pytest.mark.parametrize("scenario, expected", [
    ("ingress-only", [INGRESS]),
    ("nodeproxy-only", [NODEPROXY]),
    ("both", [INGRESS, NODEPROXY]),
    ("ingress-daemonset-nodeport", [INGRESS]),
])
def test_enabled_parts(rendered, scenario, expected):
    assert components(rendered(scenario)) == expected


def test_defaults_render_the_ingress_controller_only(helm):
    assert components(helm.template()) == [INGRESS]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_one_image_for_every_container(rendered, scenario):
    docs = rendered(scenario)
    values = yaml.safe_load(helmtool.scenarios()[scenario].read_text())
    app_version = yaml.safe_load((helmtool.CHART / "Chart.yaml").read_text())["appVersion"]
    tag = values.get("global", {}).get("image", {}).get("tag") or app_version
    for work in helmtool.workloads(docs):
        c = container(work)
        assert c["image"] == f"ghcr.io/platform-project/platformd:{tag}"
        assert c["imagePullPolicy"] == "IfNotPresent"


def test_global_image_settings_reach_both_parts(helm):
    digest = "sha256:" + "ab" * 32
    docs = helm.template(sets=["nodeproxy.enabled=true", "global.image.repository=registry.example/p",
                               f"global.image.digest={digest}", "global.image.pullPolicy=Always",
                               "global.imagePullSecrets={pull-a}"])
    for work in helmtool.workloads(docs):
        c = container(work)
        assert (c["image"], c["imagePullPolicy"]) == (f"registry.example/p@{digest}", "Always")
        assert work["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "pull-a"}]


# --- ingress controller ------------------------------------------------------

def test_ingress_deployment_behind_a_load_balancer(rendered):
    docs = rendered("ingress-only")
    work = workload(docs, INGRESS)
    assert work["kind"] == "Deployment"
    assert work["spec"]["replicas"] == 2
    svc = one(docs, "Service")
    assert svc["spec"]["type"] == "LoadBalancer"
    assert {p["name"]: (p["port"], p["targetPort"]) for p in svc["spec"]["ports"]} == {
        "http": (80, "http"), "https": (443, "https")}
    assert svc["spec"]["selector"] == work["spec"]["selector"]["matchLabels"]
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": work["spec"]["selector"]}


def test_ingress_daemonset_with_node_ports_and_default_class(rendered):
    docs = rendered("ingress-daemonset-nodeport")
    work = workload(docs, INGRESS)
    assert work["kind"] == "DaemonSet"
    assert "replicas" not in work["spec"]
    svc = one(docs, "Service")
    assert svc["spec"]["type"] == "NodePort"
    assert svc["spec"]["externalTrafficPolicy"] == "Local"
    assert {p["name"]: p["nodePort"] for p in svc["spec"]["ports"]} == {"http": 30080, "https": 30443}
    cls = one(docs, "IngressClass")
    assert cls["metadata"]["annotations"] == {"ingressclass.kubernetes.io/is-default-class": "true"}
    assert one(docs, "PodDisruptionBudget")["spec"]["selector"] == work["spec"]["selector"]


def test_ingress_class(rendered):
    cls = one(rendered("ingress-only"), "IngressClass")
    assert cls["metadata"]["name"] == "platform"
    assert cls["spec"] == {"controller": "k8s.io/platform-ingress"}
    assert "annotations" not in cls["metadata"]


def test_single_replica_gets_no_disruption_budget(helm):
    docs = helm.template(sets=["ingress.replicaCount=1"])
    assert by_kind(docs, "PodDisruptionBudget") == []


def test_ingress_args_with_defaults(rendered):
    docs = rendered("ingress-only")
    c = container(workload(docs, INGRESS))
    fullname = f"{helmtool.RELEASE}-ingress"
    ns = helmtool.NAMESPACE
    assert c["args"][0] == "--role=ingress"
    assert parse_args(c["args"][1:]) == {
        "state-dir": "/run/platform",
        "log-format": "text",
        "ingress-class": "platform",
        "controller-class": "k8s.io/platform-ingress",
        "http-port": "80",
        "https-port": "443",
        "healthz-port": "10254",
        "publish-service": f"{ns}/{fullname}",
        "update-status-on-shutdown": True,
        "election-id": f"{fullname}-leader",
        "configmap": f"{ns}/{fullname}",
        "sync-rate-limit": "0.3",
    }
    # The objects the flags name are the ones rendered.
    assert one(docs, "Service")["metadata"]["name"] == fullname
    assert one(docs, "ConfigMap")["metadata"]["name"] == fullname


def test_ingress_args_from_values(rendered):
    c = container(workload(rendered("ingress-daemonset-nodeport"), INGRESS))
    args = parse_args(c["args"][1:])
    assert "publish-service" not in args and "update-status-on-shutdown" not in args
    assert {k: args[k] for k in (
        "publish-status-address", "watch-ingress-without-class", "watch-namespace",
        "default-ssl-certificate", "default-backend-service", "allow-snippet-annotations")} == {
        "publish-status-address": "192.0.2.10",
        "watch-ingress-without-class": True,
        "watch-namespace": "apps",
        "default-ssl-certificate": "platform/default-tls",
        "default-backend-service": "platform/default-backend",
        "allow-snippet-annotations": True,
    }


def test_ssl_passthrough_flag(helm):
    off = parse_args(container(workload(helm.template(), INGRESS))["args"][1:])
    assert "enable-ssl-passthrough" not in off
    on = parse_args(container(workload(helm.template(sets=["ingress.enableSSLPassthrough=true"]), INGRESS))["args"][1:])
    assert on["enable-ssl-passthrough"] is True


def test_extra_args(helm):
    docs = helm.template(sets=["ingress.extraArgs.source=api", "ingress.extraArgs.kubeconfig=false",
                               "ingress.extraArgs.watch-ingress-without-class=true",
                               "ingress.publishStatusAddress=a: b # c", "ingress.publishService.enabled=false"])
    args = parse_args(container(workload(docs, INGRESS))["args"][1:])
    assert args["source"] == "api" and args["watch-ingress-without-class"] is True
    assert "kubeconfig" not in args
    # Values are quoted as YAML strings, so YAML syntax in them stays text.
    assert args["publish-status-address"] == "a: b # c"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_only_known_flags_are_passed(rendered, scenario):
    known = {INGRESS: INGRESS_FLAGS, NODEPROXY: NODEPROXY_FLAGS}
    for work in helmtool.workloads(rendered(scenario)):
        args = container(work)["args"]
        role = {INGRESS: "ingress", NODEPROXY: "nodeproxy"}[helmtool.component_of(work)]
        assert args[0] == f"--role={role}"
        assert set(parse_args(args[1:])) <= known[helmtool.component_of(work)]


def test_ingress_env_from_the_downward_api(rendered):
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
           for e in container(workload(rendered("ingress-only"), INGRESS))["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "NODE_NAME": "spec.nodeName",
                   "POD_IP": "status.podIP"}


def test_ingress_probes_and_ports(rendered):
    c = container(workload(rendered("ingress-only"), INGRESS))
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 10254, "scheme": "HTTP"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 10254, "scheme": "HTTP"}
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"http": 80, "https": 443, "metrics": 10254}


def test_ingress_runs_without_root(rendered):
    pod = workload(rendered("ingress-only"), INGRESS)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    sc = container({"spec": {"template": {"spec": pod}}})["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
    assert "hostNetwork" not in pod


def test_ingress_state_dir_is_a_fresh_empty_dir(rendered):
    pod = workload(rendered("ingress-only"), INGRESS)["spec"]["template"]["spec"]
    c = container({"spec": {"template": {"spec": pod}}})
    assert c["volumeMounts"] == [{"name": "state", "mountPath": "/run/platform"}]
    assert pod["volumes"] == [{"name": "state", "emptyDir": {}}]
    assert parse_args(c["args"][1:])["state-dir"] == "/run/platform"


def test_grace_period_covers_platformd_stop_bound(rendered):
    supervise = pytest.importorskip("platformd.supervise")
    for work in helmtool.workloads(rendered("both")):
        grace = work["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace > supervise.STOP_BOUND_SECONDS


def test_log_format_is_global(helm):
    docs = helm.template(sets=["nodeproxy.enabled=true", "global.logFormat=json"])
    for work in helmtool.workloads(docs):
        assert parse_args(container(work)["args"][1:])["log-format"] == "json"


def test_ingress_configmap_holds_global_settings(rendered):
    cm = one(rendered("both"), "ConfigMap")
    assert cm["data"] == {"proxy-body-size": "8m", "use-http2": "true"}
    assert one(rendered("ingress-only"), "ConfigMap")["data"] == {}


def test_metrics_service(rendered):
    svc = one(rendered("both"), "Service", f"{helmtool.RELEASE}-ingress-metrics")
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 10254, "targetPort": "metrics", "protocol": "TCP"}]


# --- node proxy --------------------------------------------------------------

def test_nodeproxy_daemonset(rendered):
    work = workload(rendered("nodeproxy-only"), NODEPROXY)
    assert work["kind"] == "DaemonSet"
    pod = work["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "Default"      # not cluster DNS, which it serves itself
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["tolerations"] == [{"operator": "Exists"}]
    c = container(work)
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN", "NET_RAW"]}
    assert c["securityContext"]["privileged"] is False
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["lib-modules"] == {"name": "lib-modules", "mountPath": "/lib/modules", "readOnly": True}
    assert volumes["lib-modules"]["hostPath"] == {"path": "/lib/modules", "type": "Directory"}
    assert volumes["xtables-lock"]["hostPath"] == {"path": "/run/xtables.lock", "type": "FileOrCreate"}
    assert "readOnly" not in mounts["xtables-lock"]
    # Root without CAP_DAC_OVERRIDE can write only where it may: an emptyDir.
    assert mounts["state"]["mountPath"] == "/run/platform" and volumes["state"] == {"name": "state", "emptyDir": {}}
    assert parse_args(c["args"][1:])["state-dir"] == "/run/platform"


def test_nodeproxy_probes_and_ports(rendered):
    c = container(workload(rendered("nodeproxy-only"), NODEPROXY))
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": 10256, "scheme": "HTTP"}
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"healthz": 10256}
    # Metrics bound beyond loopback get a declared port.
    c = container(workload(rendered("both"), NODEPROXY))
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"healthz": 10256, "metrics": 10249}


def test_nodeproxy_args_and_api_server(rendered):
    c = container(workload(rendered("both"), NODEPROXY))
    assert c["args"][0] == "--role=nodeproxy"
    assert parse_args(c["args"][1:]) == {
        "state-dir": "/run/platform",
        "log-format": "text",
        "health-address": "127.0.0.1",
        "health-port": "10266",
        "hostname": "$(NODE_NAME)",
        "node-ip": "$(NODE_IP)",
        "proxy-mode": "ipvs",
        "dual-stack": "auto",
        "cluster-cidr": "10.244.0.0/16",
        "masquerade-all": True,
        "scheduler": "wlc",
        "min-sync-period": "1s",
        "sync-period": "30s",
        "strict-arp": True,
        "healthz-bind-address": "0.0.0.0:10256",
        "metrics-bind-address": "0.0.0.0:10249",
    }
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NODE_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.hostIPs"}}  # both families
    assert env["KUBERNETES_SERVICE_HOST"]["value"] == "api.example.internal"
    assert env["KUBERNETES_SERVICE_PORT"]["value"] == "6443"


def test_nodeproxy_nftables_mode(helm):
    docs = helm.template(sets=["ingress.enabled=false", "nodeproxy.enabled=true", "nodeproxy.proxyMode=nftables"])
    args = container(workload(docs, NODEPROXY))["args"]
    assert parse_args(args[1:])["proxy-mode"] == "nftables"


def test_nodeproxy_privileged_mode(helm):
    docs = helm.template(sets=["ingress.enabled=false", "nodeproxy.enabled=true", "nodeproxy.privileged=true"])
    sc = container(workload(docs, NODEPROXY))["securityContext"]
    assert sc["privileged"] is True and "capabilities" not in sc


def test_packaged_chart_renders_like_the_directory(helm, rendered, tmp_path):
    helm.run("package", str(helmtool.CHART), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("platform-*.tgz")
    scenario = helmtool.scenarios()["both"]
    assert helm.template(chart=archive, values=[scenario]) == rendered("both")
