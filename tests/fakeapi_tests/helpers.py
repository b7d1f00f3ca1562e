"""Plain HTTP helpers for the fake API server tests."""


def connect(server, timeout=10):
    """An http.client connection to the fake server (https when it serves TLS)."""
    import http.client
    import ssl

    if server.tls:
        context = ssl.create_default_context(cafile=server.ca_file)
        return http.client.HTTPSConnection(server.host, server.port, timeout=timeout, context=context)
    return http.client.HTTPConnection(server.host, server.port, timeout=timeout)


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
    conn = connect(server)
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
