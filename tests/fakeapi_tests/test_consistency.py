"""Under concurrent writes, a watch from a list's resourceVersion reproduces
the server's state exactly (the list+watch contract informers rely on)."""

import json
import random
import threading

from tests.fakeapi import ApiError

from .helpers import connect, raw


def _writer(srv, seed, rounds):
    rng = random.Random(seed)
    for _ in range(rounds):
        name = f"cm-{rng.randrange(8)}"
        current = srv.get("configmaps", "default", name)
        try:
            if current is None:
                srv.create({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": name, "namespace": "default",
                                         "labels": {"n": str(rng.randrange(3))}}})
            elif rng.random() < 0.3:
                srv.delete("configmaps", "default", name)
            else:
                current["data"] = {"v": str(rng.random())}
                current["metadata"]["labels"] = {"n": str(rng.randrange(3))}
                srv.update(current)   # carries its resourceVersion: may conflict
        except ApiError as e:
            assert e.code in (404, 409), e.status()


def _replay(srv, rv, selector=None):
    """Fold a 1-second watch from `rv` into {name: resourceVersion}, checking order."""
    conn = connect(srv)
    query = f"watch=1&resourceVersion={rv}&timeoutSeconds=1"
    if selector:
        query += f"&labelSelector={selector}"
    conn.request("GET", f"/api/v1/namespaces/default/configmaps?{query}")
    state, last = {}, 0
    for line in conn.getresponse().read().splitlines():
        event = json.loads(line)
        meta = event["object"]["metadata"]
        assert int(meta["resourceVersion"]) > last, "events arrive in resourceVersion order"
        last = int(meta["resourceVersion"])
        if event["type"] == "DELETED":
            state.pop(meta["name"], None)
        else:
            state[meta["name"]] = meta["resourceVersion"]
    conn.close()
    return state


def _state(srv, label=None):
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"]
            for o in srv.list_objects("configmaps", "default")
            if label is None or o["metadata"]["labels"]["n"] == label}


def test_concurrent_writes_replay_to_the_same_state(fake_api):
    _, listed, _ = raw(fake_api, "GET", "/api/v1/namespaces/default/configmaps")
    start = listed["metadata"]["resourceVersion"]
    threads = [threading.Thread(target=_writer, args=(fake_api, seed, 60)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _state(fake_api)
    assert _replay(fake_api, start) == _state(fake_api)
    assert _replay(fake_api, start, "n=1") == _state(fake_api, "1")
