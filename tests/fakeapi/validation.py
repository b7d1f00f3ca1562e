"""Object validation mirroring the real server's rules and messages.

`validate(rt, obj)` returns a list of `FieldError`s; the registry turns a
non-empty list into a 422 Invalid Status. Rules are copied in spirit from
`pkg/apis/*/validation` for the fields this project reads or writes; fields
we never look at are not checked.
"""

from __future__ import annotations

import ipaddress
import re

from . import gatewayapi
from .errors import (FieldError, duplicate, forbidden_field, invalid, not_supported, required,
                     too_long, too_many)
from . import admission
from .resources import ResourceType

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_RE = re.compile(f"^{_DNS1123_LABEL}$")
_DNS1123_SUBDOMAIN_RE = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")
_DNS1035_LABEL_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_WILDCARD_RE = re.compile(rf"^\*\.{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")
_QUALIFIED_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_IANA_SVC_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")

DNS1123_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric "
                     "characters or '-', and must start and end with an alphanumeric character "
                     "(e.g. 'my-name',  or '123-abc', regex used for validation is "
                     "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
DNS1123_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                         "characters, '-' or '.', and must start and end with an alphanumeric "
                         "character (e.g. 'example.com', regex used for validation is "
                         "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
DNS1035_LABEL_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or "
                     "'-', start with an alphabetic character, and end with an alphanumeric "
                     "character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
                     "'[a-z]([-a-z0-9]*[a-z0-9])?')")
WILDCARD_MSG = ("a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS "
                "subdomain, which must consist of lower case alphanumeric characters, '-' or "
                "'.' and end with an alphanumeric character (e.g. '*.example.com', regex used "
                "for validation is '\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?"
                "(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


# --- building blocks ------------------------------------------------------------------------

def dns1123_label_errors(value: str) -> list[str]:
    msgs = []
    if len(value) > 63:
        msgs.append("must be no more than 63 characters")
    if not _DNS1123_LABEL_RE.match(value):
        msgs.append(DNS1123_LABEL_MSG)
    return msgs


def dns1123_subdomain_errors(value: str) -> list[str]:
    msgs = []
    if len(value) > 253:
        msgs.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN_RE.match(value):
        msgs.append(DNS1123_SUBDOMAIN_MSG)
    return msgs


def dns1035_label_errors(value: str) -> list[str]:
    msgs = []
    if len(value) > 63:
        msgs.append("must be no more than 63 characters")
    if not _DNS1035_LABEL_RE.match(value):
        msgs.append(DNS1035_LABEL_MSG)
    return msgs


def path_segment_errors(value: str) -> list[str]:
    if value in (".", ".."):
        return [f"may not be '{value}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in value]


def _qualified_name_errors(value: str) -> list[str]:
    msgs = []
    prefix, _, name = value.rpartition("/")
    if "/" in value:
        if not prefix:
            msgs.append("prefix part must be non-empty")
        else:
            msgs += ["prefix part " + m for m in dns1123_subdomain_errors(prefix)]
    if not name:
        msgs.append("name part must be non-empty")
    else:
        if len(name) > 63:
            msgs.append("name part must be no more than 63 characters")
        if not _QUALIFIED_NAME_RE.match(name):
            msgs.append("name part must consist of alphanumeric characters, '-', '_' or '.', "
                        "and must start and end with an alphanumeric character (e.g. 'MyName',  "
                        "or 'my.name',  or '123-abc', regex used for validation is "
                        "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
    return msgs


def _name_rule_errors(rule: str, name: str) -> list[str]:
    return {"label": dns1123_label_errors, "dns1035": dns1035_label_errors,
            "path": path_segment_errors}.get(rule, dns1123_subdomain_errors)(name)


def validate_metadata(rt: ResourceType, obj: dict) -> list[FieldError]:
    errs: list[FieldError] = []
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    if not name:
        errs.append(required("metadata.name", "name or generateName is required"))
    else:
        for msg in _name_rule_errors(rt.name_rule, name):
            errs.append(invalid("metadata.name", name, msg))
    if rt.namespaced and not meta.get("namespace"):
        errs.append(required("metadata.namespace"))
    if not rt.namespaced and meta.get("namespace"):
        errs.append(forbidden_field("metadata.namespace", "not allowed on this type"))
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        errs.append(invalid("metadata.labels", labels, "must be a map"))
        labels = {}
    for key, value in labels.items():
        for msg in _qualified_name_errors(key):
            errs.append(invalid("metadata.labels", key, msg))
        value = "" if value is None else value
        if not isinstance(value, str):
            errs.append(invalid(f"metadata.labels", value, "must be a string"))
        elif len(value) > 63:
            errs.append(invalid("metadata.labels", value, "must be no more than 63 characters"))
        elif not _LABEL_VALUE_RE.match(value):
            errs.append(invalid("metadata.labels", value,
                                "a valid label must be an empty string or consist of alphanumeric "
                                "characters, '-', '_' or '.', and must start and end with an "
                                "alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
                                "'12345', regex used for validation is "
                                "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"))
    annotations = meta.get("annotations") or {}
    if isinstance(annotations, dict):
        for key in annotations:
            for msg in _qualified_name_errors(key.lower()):
                errs.append(invalid("metadata.annotations", key, msg))
        if sum(len(k) + len(str(v)) for k, v in annotations.items()) > 256 * 1024:
            errs.append(too_long("metadata.annotations", 256 * 1024))
    return errs


def _port_number_errors(field: str, value) -> list[FieldError]:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        return [invalid(field, value, "must be between 1 and 65535, inclusive")]
    return []


def _port_name_errors(field: str, value: str) -> list[FieldError]:
    """IANA_SVC_NAME: 1-15 chars, lowercase alnum and '-', a letter, no '--'."""
    msgs = []
    if len(value) > 15:
        msgs.append("must be no more than 15 characters")
    if not _IANA_SVC_NAME_RE.match(value):
        msgs.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if "--" in value:
        msgs.append("must not contain consecutive hyphens")
    if not re.search(r"[a-z]", value):
        msgs.append("must contain at least one letter (a-z)")
    return [invalid(field, value, m) for m in msgs]


def _ip(value) -> ipaddress._BaseAddress | None:
    try:
        return ipaddress.ip_address(value)
    except (ValueError, TypeError):
        return None


def _protocol_errors(field: str, value) -> list[FieldError]:
    if value not in ("TCP", "UDP", "SCTP"):
        return [not_supported(field, value, ["SCTP", "TCP", "UDP"])]
    return []


# --- per kind -------------------------------------------------------------------------------

def _validate_service(obj: dict) -> list[FieldError]:
    errs: list[FieldError] = []
    spec = obj.get("spec") or {}
    svc_type = spec.get("type", "ClusterIP")
    types = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]
    if svc_type not in types:
        errs.append(not_supported("spec.type", svc_type, types))
    ports = spec.get("ports") or []
    cluster_ip = spec.get("clusterIP", "")
    if svc_type == "ExternalName":
        ext = spec.get("externalName") or ""
        if not ext:
            errs.append(required("spec.externalName"))
        else:
            errs += [invalid("spec.externalName", ext, m)
                     for m in dns1123_subdomain_errors(ext.rstrip("."))]
    elif not ports and cluster_ip != "None":
        errs.append(required("spec.ports"))
    names = set()
    for i, port in enumerate(ports):
        base = f"spec.ports[{i}]"
        name = port.get("name", "")
        if len(ports) > 1 and not name:
            errs.append(required(f"{base}.name"))
        elif name:
            errs += [invalid(f"{base}.name", name, m) for m in dns1123_label_errors(name)]
            if name in names:
                errs.append(duplicate(f"{base}.name", name))
            names.add(name)
        if "port" not in port:
            errs.append(required(f"{base}.port"))
        else:
            errs += _port_number_errors(f"{base}.port", port["port"])
        errs += _protocol_errors(f"{base}.protocol", port.get("protocol", "TCP"))
        target = port.get("targetPort")
        if isinstance(target, int):
            errs += _port_number_errors(f"{base}.targetPort", target)
        elif isinstance(target, str):
            errs += _port_name_errors(f"{base}.targetPort", target)
        node_port = port.get("nodePort")
        if node_port not in (None, 0):
            if svc_type == "ClusterIP":
                errs.append(forbidden_field(f"{base}.nodePort",
                                            "may not be used when `type` is 'ClusterIP'"))
            errs += _port_number_errors(f"{base}.nodePort", node_port)
    # The server folds clusterIP into clusterIPs before validating, so errors name clusterIPs.
    for i, ip in enumerate(spec.get("clusterIPs") or ([cluster_ip] if cluster_ip else [])):
        if ip in ("None", "") and i == 0:
            continue
        if _ip(ip) is None:
            errs.append(invalid(f"spec.clusterIPs[{i}]", ip,
                                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))
    if cluster_ip == "None" and svc_type in ("NodePort", "LoadBalancer"):
        errs.append(invalid("spec.clusterIPs[0]", "None",
                            "may not be set to 'None' for LoadBalancer services"
                            if svc_type == "LoadBalancer" else
                            "may not be set to 'None' for NodePort services"))
    affinity = spec.get("sessionAffinity", "None")
    if affinity not in ("None", "ClientIP"):
        errs.append(not_supported("spec.sessionAffinity", affinity, ["ClientIP", "None"]))
    for i, ip in enumerate(spec.get("externalIPs") or []):
        if _ip(ip) is None:
            errs.append(invalid(f"spec.externalIPs[{i}]", ip,
                                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))
    policy = spec.get("externalTrafficPolicy")
    if policy is not None and svc_type in ("NodePort", "LoadBalancer") \
            and policy not in ("Cluster", "Local"):
        errs.append(not_supported("spec.externalTrafficPolicy", policy, ["Cluster", "Local"]))
    return errs


_LINK_LOCAL_MULTICAST = {4: ipaddress.ip_network("224.0.0.0/24"), 6: ipaddress.ip_network("ff02::/16")}


def _endpoint_address_errors(field: str, address, address_type: str) -> list[FieldError]:
    if address_type == "FQDN":
        name = str(address).rstrip(".")
        errs = [invalid(field, address, m) for m in dns1123_subdomain_errors(name)]
        if "." not in name:
            errs.append(invalid(field, address,
                                "should be a domain with at least two segments separated by dots"))
        return errs
    ip = _ip(address)
    want = 4 if address_type == "IPv4" else 6
    if ip is None or ip.version != want:
        return [invalid(field, address, f"must be a valid {address_type} address")]
    if ip.is_unspecified:
        return [invalid(field, address, "may not be unspecified (0.0.0.0)"
                        if want == 4 else "may not be unspecified (::)")]
    if ip.is_loopback:
        return [invalid(field, address, "may not be in the loopback range (127.0.0.0/8, ::1/128)")]
    if ip.is_link_local:
        return [invalid(field, address,
                        "may not be in the link-local range (169.254.0.0/16, fe80::/10)")]
    if ip in _LINK_LOCAL_MULTICAST[ip.version]:
        return [invalid(field, address,
                        "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)")]
    return []


def _validate_endpointslice(obj: dict) -> list[FieldError]:
    errs: list[FieldError] = []
    types = ["FQDN", "IPv4", "IPv6"]
    address_type = obj.get("addressType")
    if not address_type:
        errs.append(required("addressType"))
    elif address_type not in types:
        errs.append(not_supported("addressType", address_type, types))
    endpoints = obj.get("endpoints") or []
    if len(endpoints) > 1000:
        return errs + [too_many("endpoints", len(endpoints), 1000)]   # and nothing else, like upstream
    for i, ep in enumerate(endpoints):
        base = f"endpoints[{i}]"
        addresses = ep.get("addresses") or []
        if not addresses:
            errs.append(required(f"{base}.addresses", "must contain at least 1 address"))
        elif len(addresses) > 100:
            errs.append(too_many(f"{base}.addresses", len(addresses), 100))
        elif address_type in types:
            for j, addr in enumerate(addresses):
                errs += _endpoint_address_errors(f"{base}.addresses[{j}]", addr, address_type)
        hostname = ep.get("hostname")
        if hostname:
            errs += [invalid(f"{base}.hostname", hostname, m) for m in dns1123_label_errors(hostname)]
        node = ep.get("nodeName")
        if node:
            errs += [invalid(f"{base}.nodeName", node, m) for m in dns1123_subdomain_errors(node)]
        for cond in ("ready", "serving", "terminating"):
            value = (ep.get("conditions") or {}).get(cond)
            if value is not None and not isinstance(value, bool):
                errs.append(invalid(f"{base}.conditions.{cond}", value, "must be a boolean"))
    ports = obj.get("ports") or []
    if len(ports) > 20000:
        return errs + [too_many("ports", len(ports), 20000)]
    # Upstream does not range-check EndpointSlice port numbers (any int32 is stored).
    names = set()
    for i, port in enumerate(ports):
        base = f"ports[{i}]"
        name = port.get("name") or ""
        if name:
            errs += [invalid(f"{base}.name", name, m) for m in dns1123_label_errors(name)]
        if name in names:
            errs.append(duplicate(f"{base}.name", name))
        names.add(name)
        if "protocol" in port:
            errs += _protocol_errors(f"{base}.protocol", port.get("protocol"))
    return errs


def _validate_backend(field: str, backend: dict) -> list[FieldError]:
    """An IngressBackend: a Service (name, and port name xor number) or a resource."""
    errs: list[FieldError] = []
    service, resource = backend.get("service"), backend.get("resource")
    if service is not None and resource is not None:
        return [invalid(field, "", "cannot set both resource and service backends")]
    if service is None and resource is None:
        return [invalid(field, "", "resource or service backend is required")]
    if resource is not None:
        return _typed_reference_errors(f"{field}.resource", resource)
    name = service.get("name") or ""
    if not name:
        errs.append(required(f"{field}.service.name"))
    else:
        errs += [invalid(f"{field}.service.name", name, m) for m in dns1035_label_errors(name)]
    port = service.get("port") or {}
    has_name, has_number = bool(port.get("name")), port.get("number") not in (None, 0)
    if has_name and has_number:
        errs.append(invalid(field, "", "cannot set both port name & port number"))
    elif has_name:
        errs += _port_name_errors(f"{field}.service.port.name", port["name"])
    elif has_number:
        errs += _port_number_errors(f"{field}.service.port.number", port["number"])
    else:
        errs.append(required(field, "port name or number is required"))
    return errs


def _typed_reference_errors(field: str, ref: dict) -> list[FieldError]:
    errs: list[FieldError] = []
    group = ref.get("apiGroup")
    if group is not None:
        errs += [invalid(f"{field}.apiGroup", group, m) for m in dns1123_subdomain_errors(group)]
    for key in ("kind", "name"):
        value = ref.get(key) or ""
        if not value:
            errs.append(required(f"{field}.{key}", f"{key} is required"))
        else:
            errs += [invalid(f"{field}.{key}", value, m) for m in path_segment_errors(value)]
    return errs


def _host_errors(field: str, host: str) -> list[FieldError]:
    """A rule host or TLS host: a DNS name, possibly `*.`-wildcarded, never an IP."""
    errs = []
    if _ip(host) is not None:
        errs.append(invalid(field, host, "must be a DNS name, not an IP address"))
    if "*" in host:
        if not _WILDCARD_RE.match(host) or len(host) > 253:
            errs.append(invalid(field, host, WILDCARD_MSG))
    else:
        errs += [invalid(field, host, m) for m in dns1123_subdomain_errors(host)]
    return errs


# Exact and Prefix paths are matched literally, so ambiguous spellings are refused.
_INVALID_PATH_SEQUENCES = ("//", "/./", "/../", "%2f", "%2F")
_INVALID_PATH_SUFFIXES = ("/..", "/.")
_PATH_TYPES = ["Exact", "ImplementationSpecific", "Prefix"]


def _http_path_errors(field: str, path: dict) -> list[FieldError]:
    value = path.get("path") or ""
    path_type = path.get("pathType")
    if not path_type:
        return [required(f"{field}.pathType", "pathType must be specified")]
    errs: list[FieldError] = []
    if path_type in ("Exact", "Prefix"):
        if not value.startswith("/"):
            errs.append(invalid(f"{field}.path", value, "must be an absolute path"))
        errs += [invalid(f"{field}.path", value, f"must not contain '{seq}'")
                 for seq in _INVALID_PATH_SEQUENCES if value and seq in value]
        errs += [invalid(f"{field}.path", value, f"cannot end with '{suffix}'")
                 for suffix in _INVALID_PATH_SUFFIXES if value.endswith(suffix)]
    elif path_type == "ImplementationSpecific":
        if value and not value.startswith("/"):
            errs.append(invalid(f"{field}.path", value, "must be an absolute path"))
    else:
        errs.append(not_supported(f"{field}.pathType", path_type, _PATH_TYPES))
    return errs + _validate_backend(f"{field}.backend", path.get("backend") or {})


def _validate_ingress(obj: dict) -> list[FieldError]:
    errs: list[FieldError] = []
    spec = obj.get("spec") or {}
    rules = spec.get("rules") or []
    default = spec.get("defaultBackend")
    if default is not None:
        errs += _validate_backend("spec.defaultBackend", default)
    elif not rules:
        errs.append(invalid("spec.rules", rules, "either `defaultBackend` or `rules` must be specified"))
    for i, rule in enumerate(rules):
        base = f"spec.rules[{i}]"
        if rule.get("host"):
            errs += _host_errors(f"{base}.host", rule["host"])
        http = rule.get("http")
        if http is None:
            continue
        paths = http.get("paths") or []
        if not paths:
            errs.append(required(f"{base}.http.paths"))
        for j, path in enumerate(paths):
            errs += _http_path_errors(f"{base}.http.paths[{j}]", path)
    for i, tls in enumerate(spec.get("tls") or []):
        for j, host in enumerate(tls.get("hosts") or []):
            errs += _host_errors(f"spec.tls[{i}].hosts[{j}]", host)
        secret = tls.get("secretName")
        if secret:
            errs += [invalid(f"spec.tls[{i}].secretName", secret, m)
                     for m in dns1123_subdomain_errors(secret)]
    class_name = spec.get("ingressClassName")
    if class_name is not None:
        errs += [invalid("spec.ingressClassName", class_name, m)
                 for m in dns1123_subdomain_errors(class_name)]
    return errs


def _validate_ingress_class(obj: dict) -> list[FieldError]:
    spec = obj.get("spec") or {}
    controller = spec.get("controller") or ""
    errs: list[FieldError] = []
    if not controller:
        return errs
    if len(controller) > 250:
        errs.append(too_long("spec.controller", 250))
    domain = controller.split("/", 1)[0]
    if "/" not in controller or dns1123_subdomain_errors(domain):
        errs.append(invalid("spec.controller", controller,
                            "must be a domain-prefixed path (such as \"acme.io/foo\")"))
    return errs


def _rfc3339_micro(value) -> bool:
    return isinstance(value, str) and bool(
        re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$", value))


def _validate_lease(obj: dict) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errs: list[FieldError] = []
    for field in ("leaseDurationSeconds", "leaseTransitions"):
        value = spec.get(field)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            errs.append(invalid(f"spec.{field}", value, "must be an integer"))
        elif field == "leaseDurationSeconds" and value <= 0:
            errs.append(invalid(f"spec.{field}", value, "must be greater than 0"))
        elif value < 0:
            errs.append(invalid(f"spec.{field}", value, "must be greater than or equal to 0"))
    holder = spec.get("holderIdentity")
    if holder is not None and not isinstance(holder, str):
        errs.append(invalid("spec.holderIdentity", holder, "must be a string"))
    for field in ("acquireTime", "renewTime"):
        value = spec.get(field)
        if value is not None and not _rfc3339_micro(value):
            errs.append(invalid(f"spec.{field}", value, "must be an RFC3339 time"))
    return errs


_CONFIG_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+$")
_CONFIG_KEY_MSG = ("a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
                   "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation "
                   "is '[-._a-zA-Z0-9]+')")
_MAX_CONFIG_BYTES = 1024 * 1024


def _config_key_errors(field: str, keys) -> list[FieldError]:
    errs = []
    for key in keys:
        if len(key) > 253:
            errs.append(invalid(field, key, "must be no more than 253 characters"))
        elif not _CONFIG_KEY_RE.match(key) or key in (".", ".."):
            errs.append(invalid(field, key, _CONFIG_KEY_MSG))
    return errs


def _validate_configmap(obj: dict) -> list[FieldError]:
    data, binary = obj.get("data") or {}, obj.get("binaryData") or {}
    errs = _config_key_errors("data", data) + _config_key_errors("binaryData", binary)
    for key in set(data) & set(binary):
        errs.append(invalid("data", key, "duplicate of key present in binaryData"))
    size = sum(len(k) + len(str(v)) for k, v in data.items()) + sum(
        len(k) + len(str(v)) * 3 // 4 for k, v in binary.items())
    if size > _MAX_CONFIG_BYTES:
        errs.append(too_long("", _MAX_CONFIG_BYTES))
    return errs


def _validate_secret(obj: dict) -> list[FieldError]:
    data = obj.get("data") or {}
    errs = _config_key_errors("data", data)
    if sum(len(str(v)) * 3 // 4 for v in data.values()) > _MAX_CONFIG_BYTES:
        errs.append(too_long("data", _MAX_CONFIG_BYTES))
    if obj.get("type") == "kubernetes.io/tls":
        for key in ("tls.crt", "tls.key"):
            if key not in data:
                errs.append(required(f"data[{key}]"))
    return errs


def _validate_event(obj: dict, rt: ResourceType) -> list[FieldError]:
    """Events: the legacy rules every Event passes, plus the strict ones for
    events created through events.k8s.io/v1 (storage is the core form)."""
    errs: list[FieldError] = []
    new_api = rt.group == "events.k8s.io"
    involved = (obj.get("regarding") if new_api else obj.get("involvedObject")) or {}
    involved_field = "regarding.namespace" if new_api else "involvedObject.namespace"
    namespace = (obj.get("metadata") or {}).get("namespace") or ""
    involved_ns = involved.get("namespace") or ""
    if not obj.get("eventTime"):
        # Old-style events: the event lives in its object's namespace
        # (cluster-scoped objects: "default", for old clients).
        if (involved_ns and namespace != involved_ns) or \
                (not involved_ns and namespace not in ("", "default")):
            errs.append(invalid(involved_field, involved_ns, "does not match event.namespace"))
    else:
        if not involved_ns and namespace not in ("default", "kube-system"):
            errs.append(invalid(involved_field, involved_ns, "does not match event.namespace"))
        controller = obj.get("reportingController" if new_api else "reportingComponent")
        controller_field = "reportingController" if new_api else "source"
        if not controller:
            errs.append(required(controller_field))
        else:
            errs += [invalid(controller_field, controller, m) for m in _qualified_name_errors(controller)]
        for field, limit in (("reportingInstance", 128), ("action", 128), ("reason", 128)):
            value = obj.get(field) or ""
            if not value:
                errs.append(required(field))
            elif len(value) > limit:
                errs.append(invalid(field, "", f"can have at most {limit} characters"))
    note_field = "note" if new_api else "message"
    if len(obj.get(note_field) or "") > 1024 and obj.get("eventTime"):
        errs.append(invalid(note_field, "", "can have at most 1024 characters"))
    if not new_api:
        return errs
    # events.k8s.io/v1 only
    if not obj.get("eventTime"):
        errs.append(required("eventTime"))
    event_type = obj.get("type")
    if event_type not in ("Normal", "Warning"):
        errs.append(invalid("type", "", f"has invalid value: {event_type or ''}"))
    for field in ("deprecatedFirstTimestamp", "deprecatedLastTimestamp"):
        if obj.get(field):
            errs.append(invalid(field, "", "needs to be unset"))
    if obj.get("deprecatedCount"):
        errs.append(invalid("deprecatedCount", "", "needs to be unset"))
    if obj.get("deprecatedSource"):
        errs.append(invalid("deprecatedSource", "", "needs to be unset"))
    return errs


def _validate_rbac_rules(obj: dict) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, rule in enumerate(obj.get("rules") or []):
        if not rule.get("verbs"):
            errs.append(required(f"rules[{i}].verbs", "verbs must contain at least one value"))
        if rule.get("nonResourceURLs"):
            continue
        if not rule.get("resources"):
            errs.append(required(f"rules[{i}].resources", "resource rules must supply at least one resource"))
        if rule.get("apiGroups") is None:
            errs.append(required(f"rules[{i}].apiGroups",
                                 "resource rules must supply at least one api group"))
    return errs


def _validate_binding(obj: dict) -> list[FieldError]:
    errs: list[FieldError] = []
    ref = obj.get("roleRef") or {}
    if ref.get("kind") not in ("Role", "ClusterRole"):
        errs.append(not_supported("roleRef.kind", ref.get("kind", ""), ["ClusterRole", "Role"]))
    if not ref.get("name"):
        errs.append(required("roleRef.name"))
    for i, subject in enumerate(obj.get("subjects") or []):
        kind = subject.get("kind")
        if kind not in ("ServiceAccount", "User", "Group"):
            errs.append(not_supported(f"subjects[{i}].kind", kind, ["Group", "ServiceAccount", "User"]))
        if not subject.get("name"):
            errs.append(required(f"subjects[{i}].name"))
    return errs


_BY_KIND = {
    ("", "services"): _validate_service,
    ("discovery.k8s.io", "endpointslices"): _validate_endpointslice,
    ("networking.k8s.io", "ingresses"): _validate_ingress,
    ("networking.k8s.io", "ingressclasses"): _validate_ingress_class,
    ("coordination.k8s.io", "leases"): _validate_lease,
    ("", "secrets"): _validate_secret,
    ("", "configmaps"): _validate_configmap,
    ("rbac.authorization.k8s.io", "roles"): _validate_rbac_rules,
    ("rbac.authorization.k8s.io", "clusterroles"): _validate_rbac_rules,
    ("rbac.authorization.k8s.io", "rolebindings"): _validate_binding,
    ("rbac.authorization.k8s.io", "clusterrolebindings"): _validate_binding,
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"):
        admission.validate_validating_webhook_configuration,
}


def validate(rt: ResourceType, obj: dict) -> list[FieldError]:
    errs = validate_metadata(rt, obj)
    if rt.kind == "Event":
        errs += _validate_event(obj, rt)
    check = _BY_KIND.get(rt.key())
    if check is not None:
        errs += check(obj)
    return errs + gatewayapi.validate(rt, obj)


def _load_balancer_status_errors(obj: dict) -> list[FieldError]:
    """status.loadBalancer of Ingresses and Services, as status updates check it."""
    errs: list[FieldError] = []
    entries = (((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress")) or []
    for i, entry in enumerate(entries):
        base = f"status.loadBalancer.ingress[{i}]"
        ip, hostname = entry.get("ip") or "", entry.get("hostname") or ""
        if ip and _ip(ip) is None:
            errs.append(invalid(f"{base}.ip", ip,
                                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))
        if hostname:
            errs += [invalid(f"{base}.hostname", hostname, m) for m in dns1123_subdomain_errors(hostname)]
            if _ip(hostname) is not None:
                errs.append(invalid(f"{base}.hostname", hostname, "must be a DNS name, not an IP address"))
        for j, port in enumerate(entry.get("ports") or []):
            errs += _port_number_errors(f"{base}.ports[{j}].port", port.get("port"))
            errs += _protocol_errors(f"{base}.ports[{j}].protocol", port.get("protocol"))
    return errs


def validate_update(rt: ResourceType, old: dict, new: dict) -> list[FieldError]:
    """Rules that compare with the stored object (immutable fields), and the
    status rules (status is only written by updates: create resets it)."""
    errs = validate(rt, new) + gatewayapi.validate_update(rt, old, new)
    if rt.key() in (("", "services"), ("networking.k8s.io", "ingresses")):
        errs += _load_balancer_status_errors(new)
    if rt.key() == ("", "services"):
        old_ip = (old.get("spec") or {}).get("clusterIP")
        new_ip = (new.get("spec") or {}).get("clusterIP")
        if old_ip and new_ip != old_ip and (new.get("spec") or {}).get("type") != "ExternalName":
            errs.append(invalid("spec.clusterIPs[0]", new_ip, "may not change once set"))
    if rt.key() == ("networking.k8s.io", "ingressclasses"):
        before, after = ((o.get("spec") or {}).get("controller") for o in (old, new))
        if before != after:
            errs.append(invalid("spec.controller", after, "field is immutable"))
    if rt.key() == ("discovery.k8s.io", "endpointslices"):
        if old.get("addressType") != new.get("addressType"):
            errs.append(invalid("addressType", new.get("addressType"), "field is immutable"))
    if rt.key() == ("", "secrets") and old.get("type") != new.get("type"):
        errs.append(invalid("type", new.get("type"), "field is immutable"))
    for field in ("data", "stringData", "binaryData"):
        if rt.key() in (("", "secrets"), ("", "configmaps")) and old.get("immutable") \
                and old.get(field) != new.get(field):
            errs.append(forbidden_field(field, "field is immutable when `immutable` is set"))
    return errs
