"""#15 least privilege: the ingress controller holds TLS Secrets only.

With the controller's token, every Secret of every type was listed and kept
in memory (an Opaque password of another namespace included). Informers for
``TLS_SECRETS`` ask the API server (``fieldSelector=type=kubernetes.io/tls``)
and the file source for those only.
"""

from __future__ import annotations

from platformd.common import kubeclient, resources
from platformd.common.apisource import ApiSource
from platformd.common.filesource import FileSource
from platformd.common.informer import InformerFactory

TLS = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
       "metadata": {"name": "cert", "namespace": "team-a"}, "data": {"tls.crt": "eA==", "tls.key": "eA=="}}
OPAQUE = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
          "metadata": {"name": "password", "namespace": "team-b"}, "data": {"password": "aHVudGVyMg=="}}


def _keys(informer) -> list[str]:
    return sorted(informer.store.list_keys()) if hasattr(informer.store, "list_keys") else sorted(
        f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in informer.store.list())


def test_only_tls_secrets_are_listed_watched_and_kept(fake_api):
    fake_api.create(TLS)
    fake_api.create(OPAQUE)
    factory = InformerFactory(ApiSource(kubeclient.load(str(fake_api.kubeconfig))))
    informer = factory.informer(resources.TLS_SECRETS)
    factory.start()
    try:
        assert factory.wait_for_sync(10)
        assert _keys(informer) == ["team-a/cert"]
        # Watched with the selector too: a new Opaque Secret never arrives,
        # a new TLS one does.
        fake_api.create({**OPAQUE, "metadata": {"name": "other", "namespace": "team-b"}})
        fake_api.create({**TLS, "metadata": {"name": "cert2", "namespace": "team-a"}})
        import time
        deadline = time.monotonic() + 10
        while _keys(informer) != ["team-a/cert", "team-a/cert2"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _keys(informer) == ["team-a/cert", "team-a/cert2"]
    finally:
        factory.stop()


def test_the_controller_asks_for_tls_secrets(tmp_path):
    from platformd.ingress.controller import Controller, ControllerOptions

    controller = Controller(InformerFactory(FileSource(str(tmp_path))), None, ControllerOptions())
    assert controller.secrets.resource == resources.TLS_SECRETS
    assert resources.TLS_SECRETS.field_selector == "type=kubernetes.io/tls"
    assert resources.TLS_SECRETS.collection == resources.SECRETS


def test_the_file_source_applies_the_selector(tmp_path):
    import yaml

    (tmp_path / "secrets.yaml").write_text(yaml.safe_dump_all([TLS, OPAQUE]))
    source = FileSource(str(tmp_path))
    try:
        assert [o["metadata"]["name"] for o in source.list(resources.TLS_SECRETS, None).items] == ["cert"]
        assert len(source.list(resources.SECRETS, None).items) == 2
    finally:
        source.close()
