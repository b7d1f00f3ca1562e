"""Plain HTTP helpers for the fake API server tests."""


def raw(server, method, path, body=None, query=None, content_type="application/json",
        accept="application/json", token=None):
    """One plain HTTP request (no client retries); returns (status, parsed body, headers)."""
    import http.client
    import json
    from urllib.parse import urlencode

    if query:
        path += "?" + urlencode(query)
    headers = {"Accept": accept}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    payload = None
    if body is not None:
        headers["Content-Type"] = content_type
        payload = body if isinstance(body, (str, bytes)) else json.dumps(body)
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    try:
        conn.request(method, path, body=payload, headers=headers)
        resp = conn.getresponse()
        text = resp.read().decode()
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = text
        return resp.status, parsed, dict(resp.getheaders())
    finally:
        conn.close()
