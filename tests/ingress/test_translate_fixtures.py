"""Shared builders for the translation tests, plus checks of the builders.

Objects are the plain dicts the API returns, written as literals; ``translate``
wraps ``build`` with our IngressClass and a fixed clock. Certificate material
(base64 PEM, as in a Secret's ``data``) was generated once with openssl:
``RSA_*`` for example.com and *.example.com, ``EC_*`` for ec.example.org, both
valid from 2026-11-22 to 2126-10-29; ``OTHER_*`` are unrelated keys.
"""

from __future__ import annotations

from pathlib import Path

from platformd import paths
from platformd.ingress import render as render_mod
from platformd.ingress.snapshot import Snapshot
from platformd.ingress.translate import TranslateOptions, Translation, build
from platformd.ingress.view import RuntimePaths

NOW = 1893456000.0  # 2030-01-01, inside the test certificates' validity
CREATED = "2024-01-01T00:00:00Z"

RSA_CRT = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUROakNDQWg2Z0F3SUJBZ0lVSzZqTHVHTld3THJHbm0rOEtXY05QQjJaUzRFd0RRWUpLb1pJaHZjTkFRRUwKQlFBd0ZqRVVNQklHQTFVRUF3d0xaWGhoYlhCc1pTNWpiMjB3SUJjTk1qWXhNVEl5TURNeU5ETXhXaGdQTWpFeQpOakV3TWprd016STBNekZhTUJZeEZEQVNCZ05WQkFNTUMyVjRZVzF3YkdVdVkyOXRNSUlCSWpBTkJna3Foa2lHCjl3MEJBUUVGQUFPQ0FROEFNSUlCQ2dLQ0FRRUE0aWNjVVY1N25yQkJvaXVZY3V0NUhUTHl5azJORFNPUnh2dTkKQ2t3a2diVzY0dS8xbXZvVHFJdGY0NEJhNlB6eFBnSEhjdDhVcy81Ri93ZFdrYWt5N1ZMUUFEUkl6eDVIRmo4SApjV01hZ1NFUWZ0T09aRXNDbWtWK2ZWemRud2J5UEhYVHNFbWZianZFMFdBbFNZSjRIdUk4TkJQVVlXQWhEL216CmcvN2Rqa0xiTFdTTmhBZCtrSGZGb3hMTEQwYWVKMnp1L2ZUeEhySzhySXcxRmNKcm1GZkJmNzVLaDRNcUJUbG4KbURUU2YxOGJZYmc4L0owemVZQy9pUytmMUY1K3ZMeU95YUl3UW0wV0prREo0ZmNtOStCcGZQZzAyUFpGRzVUdQp0bEl2VGJSWnJXbWtneGhYWGcxV0I4MXVDS0hPckd0MGpiakJFWHF6WG80MzQwSTkvUUlEQVFBQm8zb3dlREFkCkJnTlZIUTRFRmdRVVdxV3VsdnIyQ2k1T3FCaVlrOUNtaVdpSm1Yd3dId1lEVlIwakJCZ3dGb0FVV3FXdWx2cjIKQ2k1T3FCaVlrOUNtaVdpSm1Yd3dEd1lEVlIwVEFRSC9CQVV3QXdFQi96QWxCZ05WSFJFRUhqQWNnZ3RsZUdGdApjR3hsTG1OdmJZSU5LaTVsZUdGdGNHeGxMbU52YlRBTkJna3Foa2lHOXcwQkFRc0ZBQU9DQVFFQXVxUzZBcGJxCnhwV0pTb2xVUUhOOWxLUzVlSnpTcnJvNExUaXdUam94NW16dGhmVStSNjVpUXNTMnFSL1Z3T1pKalY5Uk9WdGcKcTlxNnlSbU5BTkdMb2w4Uys5aSsrSEoxSTluazQ3SkNqS1hPTi9KUVlIT2FRbzlxNncwalpHb2RYaHdjdzdoegpuMjVkWXpyQjBTNW1kc1NXQ3NXRFdZeGNSS3pYd0hFbHB3RHBDWXRpQ0RzTTlLQ0ExRVpOdEdZc0Vtc1M1OU14CnlaR3A2MlpDU2cwejNtZm5QdG9LRkpleWRNYS9ZaXZvVlJiMzlxRkFiRGNZOCtiMFFuQ0czbVhXOW55MUNUVUkKQy9WZzdhS1ZZM0IxSmlIemRXSFBST3EvVUhpeUx4TXVtdnJiQXpza2hmU2orNUpiL1RuUDhVRUlwbkt1N2plTwpMYi9mTyt4N3BDQUxqZz09Ci0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K"
RSA_KEY = "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JSUV2UUlCQURBTkJna3Foa2lHOXcwQkFRRUZBQVNDQktjd2dnU2pBZ0VBQW9JQkFRRGlKeHhSWG51ZXNFR2kKSzVoeTYza2RNdkxLVFkwTkk1SEcrNzBLVENTQnRicmk3L1dhK2hPb2kxL2pnRnJvL1BFK0FjZHkzeFN6L2tYLwpCMWFScVRMdFV0QUFORWpQSGtjV1B3ZHhZeHFCSVJCKzA0NWtTd0thUlg1OVhOMmZCdkk4ZGRPd1NaOXVPOFRSCllDVkpnbmdlNGp3MEU5UmhZQ0VQK2JPRC90Mk9RdHN0WkkyRUIzNlFkOFdqRXNzUFJwNG5iTzc5OVBFZXNyeXMKakRVVndtdVlWOEYvdmtxSGd5b0ZPV2VZTk5KL1h4dGh1RHo4blRONWdMK0pMNS9VWG42OHZJN0pvakJDYlJZbQpRTW5oOXliMzRHbDgrRFRZOWtVYmxPNjJVaTlOdEZtdGFhU0RHRmRlRFZZSHpXNElvYzZzYTNTTnVNRVJlck5lCmpqZmpRajM5QWdNQkFBRUNnZ0VBRWVSb1FDUEtnZjZONHNleU12MWdRcWdpUDFFdFpLbTR3ZFp1MlY2MjBMQlIKRGQxUVFDZWk0SVhPVzFCdllObUtPSTZwZWZRZVRqTkMxRzkvTU4wREUzV20wUzFSeVZrcTVKNnQ5eEdSS2tBMApidVJMOHJGZ2psWUxNTjNsQnN6azQxV3JIdHBrUzdOYzJmZlNXMk9BSDJsa3UvWUpxbjZSZnhNUldkTVRNa3IvCnVkYWRIQVhvQTJTOUdXSUpBTzFaYmRUak9CeS9WYUQrWVRMRmhzdHdreHJ1TXFlWG5KMTVwU2RWZlNBRkhFUysKZDMzT2ZrcERvY0hvakVhakZHUk5zUTQvSURvdXB5NHlKRjRUcXRyOFJGRTEraVNKdTBpQlVuSkVFZFhUTURrKwoxU0RycVhweERyS295aHZBeDF0aWJoTk03NXhWVDl3dmJBQmZIQjgzSFFLQmdRRDFCNUVCL08yNTJMZ2wwZmJECldraUYycDR3M0RVWkFaK2JvR3pKR3JQU2hCOFBwNUZDakM3Mkt2OXNrWEoxL1ZYOTZZbi9pVlZaUk9kUVpncTAKa1A4M21VSkdoMDVtbTFHeW1rakU3QmtKTWwwSmhyOVllVTg0TjJVa0lMTDBHMGk4dmszcHpJNmRuazNZUlB4TQplYitSYzJuSVRsbDQzUFlkVzhKTWVoNGlSd0tCZ1FEc1J5K1VTT1BBbXVDaGNLMVErb3E5MXVPR3ZEQzlGbjNzClFnZmlaaVl1SEJpaTlFZVVyMk4rMGJ3K3BSK1EramVXbnFENzdXUitINWJOWWJEZjIwWktlbTFKeENuZ01zcU0KakUyNndYLzBvUFFVVGZ0eVlOTm9MMDI4UXVDeTdLOGFlTGs5ZTZGeW1HbGNQNEcrbTl4Zno0SmpZSW1sNStwaApMQ0hTekdvYm13S0JnUUNoZ2pGRXZERCtOU2w4VkY5dytNdWczeTh5U1pQK1BhRzA5Uk4vbzBnd1ZNSWNrWGtnCkFrTGFKQkZrd0tKUHY0SzA4UUR6SE5UVEdLWFh5c3IzcGpOenRHT0pGWnJKNjByNGpOVzJaMkZCUEo4eXJremwKeG1BL1Q5UXM4aGpDNmxFUmgrYlhXdXdPWE5BMjQ1SGgzc1kwMjN3NGVkeGozRkdsbkZ3QUNPWmY5UUtCZ0JwaApORUcxQmFDYWFodjhMWTJOKzNHSWpXeWNsRUI0UTJUZVZtMERoSjIvUzB6ZVF5T3BsVTB5YzNiM0RwZ3NKNHFzCmVVTEhWV0h6ZXUzQlMzTWkweTA3ai9vZGFhTjdhRHZhNms3QWpkMnRIck1wcGJvMmIwUUJqQWRKM0RaOTBHci8KTVlkWXgwUzVHWUpRSU5jOEpaV1k0SERoOVZ4TmtWQjZFZWlzSStpakFvR0FXbzQ5a3pLSVFha2xhdFJzMmNOOQo0RWJhTmJuVnlxdWxoSDM5Ty9vTnVRUHpjWlQxOFVvL2VhbUR3K3BpcjQ0enZGekQ4ZUFIUmNLYzJnZEp0cmg1CmpGVTJpOVo5ZWIycGtKODJDMmNVK3lLVjI4Qlc4UWJ0T2YrZ0d6R3l4VFRCd2ppbDZQcFlzcFR0UFBtM1d1OHkKVjVSSEIxd3A0UHJkSTk3OG5rUDVoT1E9Ci0tLS0tRU5EIFBSSVZBVEUgS0VZLS0tLS0K"
OTHER_RSA_KEY = "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JSUV2UUlCQURBTkJna3Foa2lHOXcwQkFRRUZBQVNDQktjd2dnU2pBZ0VBQW9JQkFRRENiNGVTN0FzZU1sTnAKbEVXTFF0UlZpWDk1bGNqUnpTeUN2Ukc4REF0N0JyTGl3ZDdad0x2SDFkYTJXNFRHSWpmYUEyaWFOUXBrWXpwOApRZmZWbzF0dXRQSG1KZWtOSDRTZ3FQWmt3citJRkxNcmtESktCdFVhYlg0Q0x0RG9nWHNabmVkUmo1YmtvTUtTCnhqOXU5THNnUmpjcmhCOSswWmdvWi8yR2gwN25jU2dxN3cvdHlSVTUraXdUdXNXb0JZU3Z3aGVpRzcyc210ZmEKQWFtNXI5Z3gzaUg3cjg5eVV4UFp0dW8ybVhqY2lGM3Q2M1FFTTFmT3ZxL2pmSDR5T2llRWpjSk1UOWs0YWJRZAp6NTZqQm52aHRqdjUwTHFMT2pjZWhmRFphRUlSQ3RCZnNnWS8rb281a3ZEL2c0VENWbDZxMjFIa3ZFMVpRY29ECnRNd2FhbUdIQWdNQkFBRUNnZ0VBU1dFcEU5aFVpOVZuYUlHbVMxdng0Y1JPSVRkWHZtSkdDYU5NVmFGZ0ZkS2QKNFhsVVh1N2ZqNWdTKytpSEwvV0xDWkxldjlBRHQ0WkJkTks2czF4KzdjV0pRNWdNSDhGRTN4TlZSZ3EvbVI1aQp6aTZSNUNFMi9NM1UwQU1XSWFGNE1WOUlCUjZCVHBDalRoeFdwVXZrY1ZZK2pRUkVsS3FLVjdtRFUybXViQ2ErCmRuSllZUXVjSTIxdzJHTitQZHhNWll4TVNRZndRNGtIY1ArazEwQTJiRTVEdWpKUlBjT0paUk80aHUzMXArK2kKZFNmQXZwb0NkSUlrZlNqMjRKRzh1cllXR0lGbW9aWStWR3NWalkzblEveGMvanlQL2ZGVkU5dHdSNUNWMFdFVQpaODlhdFZ1WVczZy92ZmQzakFpSHgxRnQ0S3lGWEwza2I1UEZ1TWNwblFLQmdRRHBQZ0tWYTFqOGdkV1p0SzYrCldSdXorYUo0WVJmTi9sU0NLdkZ1bktPbHQ2ZWJ0cDkvS2xQQjU3STVJNnJtY1pyVHRMOVVrK25CR2EzNmsrN2YKZnZwS0E3dFF4YkgwTFBTbTVoNXB0WHR1WlY5NTdob1ZOaERwMjgybzIwcEZDQUZicUkrc2gveHhuQ2E3YVQxOQpPdDhOenZWRXc5QXE5bkcvM0ovS1ZVOUxKUUtCZ1FEVmFESytYTDM0ZDUrTDQzaUk4VW42UWw1WXltaVlhdGd1CmQxVEZ3ZDJtWVZnb1ZmSFZIeXc1TDZzODQ4L3Awbm1NellBMXdCSUVaUSswVEdnOVF3VUZQOEJidGlrOEUxOFIKZ1k3cW1IVnRjZDVDZGhsSzRZdDBMUWtsbjlPMTRJclZDQk9IVWZJS2ZHNE4vcWVPSiswditqKzBMK1ovaVVtUwpTbnBoVXQ3UU93S0JnSHRBMFl5MEZXb2FFZzRQZE9nUm5wb1VxTTZFUUZnU3RnV3pPN0lBQkZwbUdxUW1kVkoxCnc1ME1HeG9teHdEUHQ4bDRFa05YaG9jTVV1dS9rTk41L2psdWoyVzNrcm85cDJzcTM1ZHMxN1VXek1WYUZWNXcKRzYvNC8wemoxUE4xcjRJSUtTUTdHQ1BSS0lhUXJuV216b2cxZlZiQlF4Znc4MXMzOHhpd3pCNGhBb0dBRitRdgpjaUpkM2pnK00ySUc5NFhUMjJHY3dHSUFyYmVnZGl0RDRWUGY1YVdXUWdYRktpL3dPb0s4ci9kdEttYzIxbTJYClFlMDcxeVFkU3ZrVzNtem5YZndTSS9KVDBYYjF1TGNCY2dBWmZXUTNGc2V6OHk4bTlwMm9IWDgwSzNOMDkzNk0KK1NSU2Jad2FraFNGVzZQYXFQbGlNbUQrZEI3Qmp0QXB2VVdTemtzQ2dZRUF4K0laYnh0MUR0bE1wYS93aFFXTwpLMjJGVFRBTHByd0tNMSs4MkxMTzd4bFJSVHhycTZ0eTFUT04xakNDL1hzT29ONFE5b2xjS2lONkhIdGZjaCtPCldEYXEyUUNyS1d1bWM2dFlkaDNXQThCRFBscjhJOVdWRFlpVVA2SmR6RCtENHJnbVh2SWNiMnRsUXJUditJWFQKQUNWU0F1MVVOVWwySGlVdzFTbmp1YUk9Ci0tLS0tRU5EIFBSSVZBVEUgS0VZLS0tLS0K"
EC_CRT = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJpRENDQVMrZ0F3SUJBZ0lVUFJweWI1NjdhUXliYXRULzJHSDdhQkVmWVdFd0NnWUlLb1pJemowRUF3SXcKR1RFWE1CVUdBMVVFQXd3T1pXTXVaWGhoYlhCc1pTNXZjbWN3SUJjTk1qWXhNVEl5TURNeU5ETXlXaGdQTWpFeQpOakV3TWprd016STBNekphTUJreEZ6QVZCZ05WQkFNTURtVmpMbVY0WVcxd2JHVXViM0puTUZrd0V3WUhLb1pJCnpqMENBUVlJS29aSXpqMERBUWNEUWdBRUdaelJWZnpnSU5LamdrK05BWlloZ1Z2K2doL0ZKMFppVGVJTGNDVUUKRm4rdU4vV0k2LzJISCs0enp2Z0tURUwyOXZMZVdGZ280WnZqSmJ6bUkzc2RMYU5UTUZFd0hRWURWUjBPQkJZRQpGS1BpSkR6SDVGWVo0VThkU01QZHA4NDREdVBtTUI4R0ExVWRJd1FZTUJhQUZLUGlKRHpINUZZWjRVOGRTTVBkCnA4NDREdVBtTUE4R0ExVWRFd0VCL3dRRk1BTUJBZjh3Q2dZSUtvWkl6ajBFQXdJRFJ3QXdSQUlnZnJwM1JoKzEKbEtaWFh4aXpRcmVsN2FWT1R1T0owdHMrdjQ3UFBWaU54Q0lDSUIvSnNmYlJkN1UyN2JPT3FpdC9VcjRjMzNQUApZMEIwZE1nN29SSFFxSnlLCi0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K"
EC_KEY = "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JR0hBZ0VBTUJNR0J5cUdTTTQ5QWdFR0NDcUdTTTQ5QXdFSEJHMHdhd0lCQVFRZ0tCU0N5UWlFZHBkazFYeWYKbjlBQ3V3bUtBOUVaSlFCb0phMnowNjE5cUNhaFJBTkNBQVFabk5GVi9PQWcwcU9DVDQwQmxpR0JXLzZDSDhVbgpSbUpONGd0d0pRUVdmNjQzOVlqci9ZY2Y3alBPK0FwTVF2YjI4dDVZV0NqaG0rTWx2T1lqZXgwdAotLS0tLUVORCBQUklWQVRFIEtFWS0tLS0tCg=="
OTHER_EC_KEY = "LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0tCk1IY0NBUUVFSU82N0JSbGdHN01QUG5GNndBMXZqTWI4THhSZGFYWkdGMWpneUsvbVVyMEVvQW9HQ0NxR1NNNDkKQXdFSG9VUURRZ0FFRTJPcWYzbGxuNnhld2VMcCtyYnJRZXRhbWxVNmJJUi8xcTBMSDhLR2U2Q0hzT1Y5aTVyegpETkM0UGIwclJzNGxRR1hLallOTVQxaExPenl4L0U4Mjl3PT0KLS0tLS1FTkQgRUMgUFJJVkFURSBLRVktLS0tLQo="

def ingress_class(name="platform", controller="k8s.io/platform-ingress", default=False) -> dict:
    meta: dict = {"name": name}
    if default:
        meta["annotations"] = {"ingressclass.kubernetes.io/is-default-class": "true"}
    return {"kind": "IngressClass", "metadata": meta, "spec": {"controller": controller}}


def backend(service: str, port: int | str = 80) -> dict:
    key = "number" if isinstance(port, int) else "name"
    return {"service": {"name": service, "port": {key: port}}}


def path(p: str = "/", service: str = "web", port: int | str = 80, path_type: str | None = "Prefix") -> dict:
    item = {"path": p, "backend": backend(service, port)}
    if path_type is not None:
        item["pathType"] = path_type
    return item


def rule(host: str | None, *paths: dict) -> dict:
    r: dict = {"http": {"paths": list(paths)}}
    if host is not None:
        r["host"] = host
    return r


def ingress(
    name: str = "app",
    namespace: str = "default",
    *,
    rules=(),
    tls=(),
    default_backend: dict | None = None,
    annotations: dict | None = None,
    class_name: str | None = "platform",
    created: str = CREATED,
) -> dict:
    spec: dict = {"rules": list(rules)}
    if class_name is not None:
        spec["ingressClassName"] = class_name
    if tls:
        spec["tls"] = list(tls)
    if default_backend is not None:
        spec["defaultBackend"] = default_backend
    meta = {"name": name, "namespace": namespace, "creationTimestamp": created}
    if annotations:
        meta["annotations"] = {
            (k if "/" in k else "nginx.ingress.kubernetes.io/" + k): val for k, val in annotations.items()
        }
    return {"kind": "Ingress", "metadata": meta, "spec": spec}


def service(name: str = "web", namespace: str = "default", ports=((80, "http"),), *, type_: str = "ClusterIP",
            cluster_ip: str = "10.96.0.10", external_name: str | None = None) -> dict:
    spec: dict = {"type": type_, "ports": [{"port": p, "name": n, "protocol": "TCP"} if n else {"port": p, "protocol": "TCP"} for p, n in ports]}
    if type_ != "ExternalName":
        spec["clusterIP"] = cluster_ip
    if external_name is not None:
        spec["externalName"] = external_name
    return {"kind": "Service", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def endpoint(ip: str, ready: bool | None = True, serving: bool | None = None, terminating: bool | None = None) -> dict:
    conditions = {k: val for k, val in (("ready", ready), ("serving", serving), ("terminating", terminating)) if val is not None}
    return {"addresses": [ip], "conditions": conditions}


def endpoint_slice(service_name: str = "web", namespace: str = "default", endpoints=(), *, port: int = 8080,
                   port_name: str | None = "http", name: str | None = None, address_type: str = "IPv4") -> dict:
    port_entry: dict = {"port": port, "protocol": "TCP"}
    if port_name is not None:
        port_entry["name"] = port_name
    return {
        "kind": "EndpointSlice",
        "metadata": {"name": name or f"{service_name}-abc", "namespace": namespace,
                     "labels": {"kubernetes.io/service-name": service_name}},
        "addressType": address_type,
        "ports": [port_entry],
        "endpoints": [endpoint(e) if isinstance(e, str) else e for e in endpoints],
    }


def tls_secret(name: str = "tls", namespace: str = "default", crt: str = RSA_CRT, key: str = RSA_KEY,
               type_: str = "kubernetes.io/tls") -> dict:
    return {"kind": "Secret", "metadata": {"name": name, "namespace": namespace}, "type": type_,
            "data": {"tls.crt": crt, "tls.key": key}}


def configmap(data: dict) -> dict:
    return {"kind": "ConfigMap", "metadata": {"name": "platform-ingress", "namespace": "platform"}, "data": data}


def web(namespace: str = "default", name: str = "web", ips=("10.1.0.1",)) -> list[dict]:
    """A Service ``name`` (port 80 "http") with ready endpoints on 8080."""
    return [service(name, namespace), endpoint_slice(name, namespace, ips)]


def snapshot(*objects, with_class: bool = True) -> Snapshot:
    flat: list[dict] = []
    for obj in objects:
        flat.extend(obj if isinstance(obj, list) else [obj])
    by_kind: dict[str, list[dict]] = {}
    for obj in flat:
        by_kind.setdefault(obj["kind"], []).append(obj)
    if with_class and not by_kind.get("IngressClass"):
        by_kind["IngressClass"] = [ingress_class()]

    def key(obj: dict) -> str:
        return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"

    slices: dict[str, tuple] = {}
    for s in by_kind.get("EndpointSlice", []):
        svc = f"{s['metadata']['namespace']}/{s['metadata']['labels']['kubernetes.io/service-name']}"
        slices[svc] = slices.get(svc, ()) + (s,)
    configmaps = by_kind.get("ConfigMap", [])
    return Snapshot(
        ingresses=tuple(by_kind.get("Ingress", [])),
        ingress_classes=tuple(by_kind.get("IngressClass", [])),
        services={key(s): s for s in by_kind.get("Service", [])},
        endpoint_slices=slices,
        secrets={key(s): s for s in by_kind.get("Secret", [])},
        configmap=configmaps[0] if configmaps else None,
        configmaps={key(c): c for c in configmaps},
    )


def translate(*objects, with_class: bool = True, **options) -> Translation:
    options.setdefault("now", NOW)
    return build(snapshot(*objects, with_class=with_class), TranslateOptions(**options))


def reasons(result: Translation) -> list[str]:
    return [p.reason for p in result.problems]


def server(result: Translation, host: str):
    for s in result.configuration.servers:
        if s.hostname == host:
            return s
    raise AssertionError(f"no server {host!r} in {[s.hostname for s in result.configuration.servers]}")


def locations(result: Translation, host: str) -> dict[tuple[str, str], object]:
    """(match, path) -> Location of ``host``."""
    return {(loc.match.value, loc.path): loc for loc in server(result, host).locations}


RUNTIME = RuntimePaths(Path("/var/lib/platformd"), paths.lua_dir(), Path("/var/lib/platformd/d.crt"),
                       Path("/var/lib/platformd/d.key"))


def rendered(result: Translation) -> str:
    return render_mod.render_nginx_conf(result.configuration, RUNTIME)


def routed(result: Translation) -> dict:
    """The route table the Lua router gets for ``result`` (routes.py)."""
    from platformd.ingress.routes import payload

    return payload(result.configuration)


# --- the builders themselves -------------------------------------------------------


def test_builders_give_a_servable_configuration():
    result = translate(ingress(rules=[rule("example.com", path("/"))]), web())
    assert result.problems == ()
    assert result.owned_ingresses == ("default/app",)
    assert "example.com" in routed(result)["hosts"]
    assert "server_name _;" in rendered(result)


def test_snapshot_is_read_only():
    snap = snapshot(web())
    try:
        snap.services["x"] = {}  # type: ignore[index]
    except TypeError:
        pass
    else:
        raise AssertionError("snapshot mappings must be read-only")
