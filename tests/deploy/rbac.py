"""RBAC as sets of atoms, so two grants compare with plain set equality.

An atom is ``(scope, apiGroup, resource, verb)``: one thing one subject may do.
``granted`` derives the atoms from rendered RoleBindings/ClusterRoleBindings
and the roles they refer to; ``expected`` reads them from
deploy/rbac-expected.yaml. Rules that cannot be expressed as atoms (wildcards,
resourceNames, nonResourceURLs) are refused outright: they are never least
privilege for this project.
"""

from __future__ import annotations

from pathlib import Path

import yaml

Atom = tuple[str, str, str, str]

EXPECTED_FILE = Path(__file__).resolve().parents[2] / "deploy" / "rbac-expected.yaml"


class RbacShapeError(AssertionError):
    """A rendered role or binding has a shape the least-privilege check refuses."""


def expected(component: str, path: Path = EXPECTED_FILE) -> set[Atom]:
    entries = yaml.safe_load(path.read_text())[component]
    return {
        (e["scope"], e["apiGroup"], resource, verb)
        for e in entries for resource in e["resources"] for verb in e["verbs"]
    }


def granted(docs: list[dict], service_account: str, namespace: str) -> set[Atom]:
    """Everything the ServiceAccount ``namespace/service_account`` is granted.

    Scope is ``cluster`` for a ClusterRoleBinding, ``release`` for a RoleBinding
    in ``namespace`` and ``namespace:<ns>`` for a RoleBinding elsewhere.
    """
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
             for d in docs if d.get("kind") in ("Role", "ClusterRole")}
    atoms: set[Atom] = set()
    for binding in docs:
        if binding.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not _binds(binding, service_account, namespace):
            continue
        bns = binding["metadata"].get("namespace")
        ref = binding["roleRef"]
        role_ns = bns if ref["kind"] == "Role" else None
        role = roles.get((ref["kind"], role_ns, ref["name"]))
        if role is None:
            raise RbacShapeError(f"{binding['kind']} {binding['metadata']['name']} refers to "
                                 f"missing {ref['kind']} {ref['name']}")
        if binding["kind"] == "ClusterRoleBinding":
            scope = "cluster"
        else:
            scope = "release" if bns == namespace else f"namespace:{bns}"
        atoms |= _rule_atoms(role, scope)
    return atoms


def _binds(binding: dict, service_account: str, namespace: str) -> bool:
    return any(s.get("kind") == "ServiceAccount" and s.get("name") == service_account
               and s.get("namespace") == namespace for s in binding.get("subjects") or [])


def _rule_atoms(role: dict, scope: str) -> set[Atom]:
    atoms: set[Atom] = set()
    name = f"{role['kind']} {role['metadata']['name']}"
    for rule in role.get("rules") or []:
        for key in ("resourceNames", "nonResourceURLs"):
            if rule.get(key):
                raise RbacShapeError(f"{name}: {key} is not supported by the check")
        values = rule.get("apiGroups", []) + rule.get("resources", []) + rule.get("verbs", [])
        if any("*" in v for v in values):
            raise RbacShapeError(f"{name}: wildcard in {rule}")
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    atoms.add((scope, group, resource, verb))
    return atoms


def describe(atoms: set[Atom]) -> str:
    return "\n".join(f"  {scope:8} {group or 'core'}/{resource}: {verb}"
                     for scope, group, resource, verb in sorted(atoms)) or "  (none)"
