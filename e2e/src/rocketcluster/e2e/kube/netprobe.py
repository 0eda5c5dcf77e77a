"""Probe pods for NetworkPolicy tests: every one runs the same small program, on port
8000: ``GET /`` answers the address the connection came from; ``GET /probe?host=H&
port=P`` connects from inside the pod to H:P and says what happened (``ok`` with the
body, ``refused``, ``closed``, or the error's name). A test asks a pod, from the node,
what it can reach — the pod's own connection, judged by the realiser's policies."""

from __future__ import annotations

import textwrap
from typing import Any

import httpx

from rocketcluster.e2e.kube.harness import KubeHarness

PORT = 8000
WAIT_S = 90.0  # generous: two shared cores

PROGRAM = textwrap.dedent("""\
    import http.server, json, os, socket, threading, urllib.parse

    def probe(host, port):
        try:
            with socket.create_connection((host, port), timeout=5) as s:
                s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
                s.settimeout(5)
                data = b""
                while chunk := s.recv(4096):
                    data += chunk
        except ConnectionRefusedError:
            return {"result": "refused"}
        except OSError as exc:
            return {"result": type(exc).__name__}
        if not data:
            return {"result": "closed"}
        return {"result": "ok", "body": data.split(b"\\r\\n\\r\\n", 1)[-1].decode(errors="replace")}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            url = urllib.parse.urlparse(self.path)
            if url.path == "/probe":
                q = urllib.parse.parse_qs(url.query)
                body = json.dumps(probe(q["host"][0], int(q["port"][0]))).encode()
            else:
                body = self.client_address[0].encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    ports = [8000, *(int(p) for p in os.environ.get("PORTS", "").split(",") if p)]
    servers = [http.server.ThreadingHTTPServer(("0.0.0.0", p), Handler) for p in ports]
    for server in servers[1:]:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    servers[0].serve_forever()
    """)


def probe_pod(
    name: str,
    app: str,
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    ports: tuple[int, ...] = (),
) -> dict[str, Any]:
    """A probe pod labelled ``labels`` (else ``app: <app>``) also listening on
    ``ports`` (so policies for the cluster's ports can be judged on it)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {"app": app}},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "main",
                    "image": "probe:1",
                    "command": ["python3", "-c", PROGRAM],
                    "env": [{"name": "PORTS", "value": ",".join(map(str, ports))}],
                    "ports": [{"name": "http", "containerPort": PORT}],
                    "readinessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 1},
                }
            ],
        },
    }


def pod_ip(kube: KubeHarness, name: str, namespace: str = "default") -> str:
    def ready() -> str | None:
        pod = kube.get("pods", namespace, name) or {}
        status = pod.get("status") or {}
        conditions = status.get("conditions") or []
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            return str(status["podIP"])
        return None

    return kube.wait_for(ready, WAIT_S, f"{namespace}/{name} to be Ready")


def probe(
    kube: KubeHarness, src: str, host: str, port: int, namespace: str = "default"
) -> dict[str, Any]:
    """What pod ``src`` sees when it connects to host:port (asked from the node)."""
    url = f"http://{pod_ip(kube, src, namespace)}:{PORT}/probe"
    with httpx.Client(trust_env=False, timeout=30.0) as client:
        response = client.get(url, params={"host": host, "port": str(port)})
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        return answer
