"""The realiser's control API on 127.0.0.1, for tests and tools on the host:

- ``GET /v1/pods``: every pod the realiser runs — namespace, name, uid, ip, pids,
  ready;
- ``POST /v1/pods/{ns}/{name}/kill``: SIGKILL the pod's containers (a process or
  node failure; kubelet restarts them per ``restartPolicy``).

The DNS map is not served here: it is ``DIR/hosts.json``, which the harness reads.
"""

from __future__ import annotations

from typing import Any, Protocol

import aiohttp.web


class Controls(Protocol):
    def pods(self) -> list[dict[str, Any]]: ...
    def kill(self, namespace: str, name: str) -> list[int] | None: ...


def control_app(controls: Controls) -> aiohttp.web.Application:
    async def pods(request: aiohttp.web.Request) -> aiohttp.web.Response:
        return aiohttp.web.json_response({"pods": controls.pods()})

    async def kill(request: aiohttp.web.Request) -> aiohttp.web.Response:
        pids = controls.kill(request.match_info["ns"], request.match_info["name"])
        if pids is None:
            return aiohttp.web.json_response({"error": "no such pod here"}, status=404)
        return aiohttp.web.json_response({"killed": pids})

    app = aiohttp.web.Application()
    app.router.add_get("/v1/pods", pods)
    app.router.add_post("/v1/pods/{ns}/{name}/kill", kill)
    return app
