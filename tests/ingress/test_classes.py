"""Which Ingresses are ours (IngressClass semantics), table-driven."""

from __future__ import annotations

import pytest

from platformd.ingress.classes import is_ours
from platformd.ingress.translate import TranslateOptions
from tests.ingress.test_translate_fixtures import ingress, ingress_class, path, rule, translate, web

OURS = ingress_class("platform")
OURS_DEFAULT = ingress_class("platform", default=True)
OTHER = ingress_class("nginx", controller="k8s.io/ingress-nginx")
OTHER_DEFAULT = ingress_class("nginx", controller="k8s.io/ingress-nginx", default=True)
RENAMED = ingress_class("edge")  # ours under another name


def legacy(value: str) -> dict:
    return ingress(class_name=None, annotations={"kubernetes.io/ingress.class": value})


CASES = [
    # (description, ingress, classes, options, expected)
    ("class name of our class", ingress(class_name="platform"), [OURS], {}, True),
    ("class name of our class with another name", ingress(class_name="edge"), [RENAMED], {}, True),
    ("class name of another controller", ingress(class_name="nginx"), [OURS, OTHER], {}, False),
    ("class name without IngressClass", ingress(class_name="platform"), [], {}, False),
    ("class name wins over legacy annotation",
     ingress(class_name="nginx", annotations={"kubernetes.io/ingress.class": "platform"}), [OURS, OTHER], {}, False),
    ("class-less, no default class", ingress(class_name=None), [OURS], {}, False),
    ("class-less, our class is default", ingress(class_name=None), [OURS_DEFAULT], {}, True),
    ("class-less, another controller's default", ingress(class_name=None), [OURS, OTHER_DEFAULT], {}, False),
    ("class-less with --watch-ingress-without-class", ingress(class_name=None), [], {"watch_ingress_without_class": True}, True),
    ("legacy annotation = our class", legacy("platform"), [], {}, True),
    ("legacy annotation = other class", legacy("nginx"), [OURS_DEFAULT], {"watch_ingress_without_class": True}, False),
    ("legacy annotation honours --ingress-class", legacy("edge"), [], {"ingress_class": "edge"}, True),
    ("our controller class is configurable", ingress(class_name="x"),
     [ingress_class("x", controller="example.com/custom")], {"controller_class": "example.com/custom"}, True),
]


@pytest.mark.parametrize("desc,ing,classes,options,expected", CASES, ids=[c[0] for c in CASES])
def test_is_ours(desc, ing, classes, options, expected):
    assert is_ours(ing, classes, TranslateOptions(**options)) is expected


def test_ingresses_of_other_classes_are_ignored_entirely():
    ours = ingress("ours", rules=[rule("a.example.com", path("/"))])
    theirs = ingress("theirs", class_name="nginx", rules=[rule("b.example.com", path("/", service="missing"))],
                     annotations={"configuration-snippet": "deny all;"})
    result = translate(ours, theirs, web(), ingress_class(), ingress_class("nginx", controller="k8s.io/ingress-nginx"))
    assert result.owned_ingresses == ("default/ours",)
    assert [s.hostname for s in result.configuration.servers] == ["a.example.com"]
    assert result.problems == ()  # nothing reported about the other class's Ingress
