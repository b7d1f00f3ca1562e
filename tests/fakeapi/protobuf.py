"""Decoding Kubernetes protobuf request bodies into JSON-shaped dicts.

Why: kubectl's typed clients (`kubectl create namespace|configmap|secret|
serviceaccount|role|rolebinding|clusterrole|clusterrolebinding|token`,
`kubectl auth can-i`) send `application/vnd.kubernetes.protobuf` bodies and
do not fall back to JSON. They accept JSON answers, so only request bodies
need decoding, and only for the kinds below; any other kind gets 415.

Wire format: the magic bytes ``k8s\\0`` then a `runtime.Unknown` message
(1: typeMeta{1: apiVersion, 2: kind}, 2: raw object bytes). Field numbers
come from the `generated.proto` files of k8s.io/api and apimachinery.
"""

from __future__ import annotations

import base64
import datetime

MAGIC = b"k8s\x00"

# message -> field number -> (json name, type, repeated); type is a scalar
# name or another message's name. Maps are "map:<value type>".
_S, _B, _I, _BOOL, _TIME = "string", "bytes", "int", "bool", "time"
SCHEMAS: dict[str, dict[int, tuple[str, str, bool]]] = {
    "ObjectMeta": {1: ("name", _S, False), 2: ("generateName", _S, False),
                   3: ("namespace", _S, False), 5: ("uid", _S, False),
                   6: ("resourceVersion", _S, False), 7: ("generation", _I, False),
                   8: ("creationTimestamp", _TIME, False), 9: ("deletionTimestamp", _TIME, False),
                   10: ("deletionGracePeriodSeconds", _I, False),
                   11: ("labels", "map:string", False), 12: ("annotations", "map:string", False),
                   13: ("ownerReferences", "OwnerReference", True),
                   14: ("finalizers", _S, True)},
    "OwnerReference": {1: ("kind", _S, False), 3: ("name", _S, False), 4: ("uid", _S, False),
                       5: ("apiVersion", _S, False), 6: ("controller", _BOOL, False),
                       7: ("blockOwnerDeletion", _BOOL, False)},
    "LabelSelector": {1: ("matchLabels", "map:string", False),
                      2: ("matchExpressions", "LabelSelectorRequirement", True)},
    "LabelSelectorRequirement": {1: ("key", _S, False), 2: ("operator", _S, False),
                                 3: ("values", _S, True)},
    "ObjectReference": {1: ("kind", _S, False), 2: ("namespace", _S, False), 3: ("name", _S, False),
                        4: ("uid", _S, False), 5: ("apiVersion", _S, False),
                        6: ("resourceVersion", _S, False), 7: ("fieldPath", _S, False)},
    "LocalObjectReference": {1: ("name", _S, False)},
    # core/v1
    "Namespace": {1: ("metadata", "ObjectMeta", False), 2: ("spec", "NamespaceSpec", False)},
    "NamespaceSpec": {1: ("finalizers", _S, True)},
    "ConfigMap": {1: ("metadata", "ObjectMeta", False), 2: ("data", "map:string", False),
                  3: ("binaryData", "map:bytes", False), 4: ("immutable", _BOOL, False)},
    "Secret": {1: ("metadata", "ObjectMeta", False), 2: ("data", "map:bytes", False),
               3: ("type", _S, False), 4: ("stringData", "map:string", False),
               5: ("immutable", _BOOL, False)},
    "ServiceAccount": {1: ("metadata", "ObjectMeta", False),
                       2: ("secrets", "ObjectReference", True),
                       3: ("imagePullSecrets", "LocalObjectReference", True),
                       4: ("automountServiceAccountToken", _BOOL, False)},
    # rbac.authorization.k8s.io/v1
    "PolicyRule": {1: ("verbs", _S, True), 2: ("apiGroups", _S, True), 3: ("resources", _S, True),
                   4: ("resourceNames", _S, True), 5: ("nonResourceURLs", _S, True)},
    "AggregationRule": {1: ("clusterRoleSelectors", "LabelSelector", True)},
    "Role": {1: ("metadata", "ObjectMeta", False), 2: ("rules", "PolicyRule", True)},
    "ClusterRole": {1: ("metadata", "ObjectMeta", False), 2: ("rules", "PolicyRule", True),
                    3: ("aggregationRule", "AggregationRule", False)},
    "Subject": {1: ("kind", _S, False), 2: ("apiGroup", _S, False), 3: ("name", _S, False),
                4: ("namespace", _S, False)},
    "RoleRef": {1: ("apiGroup", _S, False), 2: ("kind", _S, False), 3: ("name", _S, False)},
    "RoleBinding": {1: ("metadata", "ObjectMeta", False), 2: ("subjects", "Subject", True),
                    3: ("roleRef", "RoleRef", False)},
    "ClusterRoleBinding": {1: ("metadata", "ObjectMeta", False), 2: ("subjects", "Subject", True),
                           3: ("roleRef", "RoleRef", False)},
    # authorization.k8s.io/v1
    "ResourceAttributes": {1: ("namespace", _S, False), 2: ("verb", _S, False), 3: ("group", _S, False),
                           4: ("version", _S, False), 5: ("resource", _S, False),
                           6: ("subresource", _S, False), 7: ("name", _S, False)},
    "NonResourceAttributes": {1: ("path", _S, False), 2: ("verb", _S, False)},
    "SelfSubjectAccessReviewSpec": {1: ("resourceAttributes", "ResourceAttributes", False),
                                    2: ("nonResourceAttributes", "NonResourceAttributes", False)},
    "SubjectAccessReviewSpec": {1: ("resourceAttributes", "ResourceAttributes", False),
                                2: ("nonResourceAttributes", "NonResourceAttributes", False),
                                3: ("user", _S, False), 4: ("groups", _S, True), 6: ("uid", _S, False)},
    "SelfSubjectAccessReview": {1: ("metadata", "ObjectMeta", False),
                                2: ("spec", "SelfSubjectAccessReviewSpec", False)},
    "SubjectAccessReview": {1: ("metadata", "ObjectMeta", False),
                            2: ("spec", "SubjectAccessReviewSpec", False)},
    # authentication.k8s.io/v1
    "BoundObjectReference": {1: ("kind", _S, False), 2: ("apiVersion", _S, False),
                             3: ("name", _S, False), 4: ("uid", _S, False)},
    "TokenRequestSpec": {1: ("audiences", _S, True), 3: ("boundObjectRef", "BoundObjectReference", False),
                         4: ("expirationSeconds", _I, False)},
    "TokenRequest": {1: ("metadata", "ObjectMeta", False), 2: ("spec", "TokenRequestSpec", False)},
}


class UnsupportedKind(ValueError):
    """The body is protobuf for a kind this decoder has no schema for."""


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(data):
            raise ValueError("truncated varint")
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, i
        shift += 7


def _fields(data: bytes):
    """(field number, value) pairs; varints as int, length-delimited as bytes."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            length, i = _varint(data, i)
            value, i = data[i:i + length], i + length
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, value


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _time(data: bytes) -> str:
    fields = dict(_fields(data))
    moment = datetime.datetime.fromtimestamp(_signed(fields.get(1, 0)), datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _scalar(kind: str, value):
    if kind == _S:
        return value.decode()
    if kind == _B:
        return base64.b64encode(value).decode()
    if kind == _I:
        return _signed(value)
    if kind == _BOOL:
        return bool(value)
    if kind == _TIME:
        return _time(value)
    return decode_message(kind, value)


def decode_message(name: str, data: bytes) -> dict:
    schema = SCHEMAS[name]
    out: dict = {}
    for number, value in _fields(data):
        if number not in schema:
            continue  # fields we do not model are dropped
        json_name, kind, repeated = schema[number]
        if kind.startswith("map:"):
            entry = dict(_fields(value))
            out.setdefault(json_name, {})[entry.get(1, b"").decode()] = \
                _scalar(kind[4:], entry.get(2, b""))
        elif repeated:
            out.setdefault(json_name, []).append(_scalar(kind, value))
        else:
            decoded = _scalar(kind, value)
            # proto2 as Kubernetes writes it sends zero values that JSON's
            # `omitempty` would leave out; drop them so both decode alike.
            if decoded not in ("", 0, False) or isinstance(decoded, dict):
                out[json_name] = decoded
    return out


def decode(body: bytes) -> dict:
    """A `k8s\\0`-framed protobuf object as the dict its JSON form would give."""
    if not body.startswith(MAGIC):
        raise ValueError("missing the k8s protobuf magic prefix")
    envelope = dict(_fields(body[len(MAGIC):]))
    type_meta = {n: v.decode() for n, v in _fields(envelope.get(1, b""))}
    api_version, kind = type_meta.get(1, ""), type_meta.get(2, "")
    if kind not in SCHEMAS:
        raise UnsupportedKind(kind)
    obj = decode_message(kind, envelope.get(2, b""))
    return {"apiVersion": api_version, "kind": kind, **obj}
