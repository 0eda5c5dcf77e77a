"""AdminClient: the broker admin REST API, typed and with errors that say what failed."""

from __future__ import annotations

from typing import Any

import httpx


class AdminError(RuntimeError):
    def __init__(self, method: str, url: str, status: int, detail: str) -> None:
        super().__init__(f"{method} {url} failed ({status}): {detail}")
        self.status = status
        self.detail = detail


class AdminClient:
    def __init__(self, address: str, timeout: float = 10.0) -> None:
        self.base = address if address.startswith("http") else f"http://{address}"
        self._http = httpx.Client(base_url=self.base, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            answer = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise AdminError(method, self.base + path, 0, str(exc)) from exc
        if answer.status_code >= 400:
            try:
                detail = answer.json().get("detail", answer.text)
            except ValueError:
                detail = answer.text
            raise AdminError(method, self.base + path, answer.status_code, str(detail))
        if answer.status_code == 204 or not answer.content:
            return None
        if answer.headers.get("content-type", "").startswith("application/json"):
            return answer.json()
        return answer.text

    def ready(self) -> bool:
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    def broker(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/v1/broker")
        return result

    def topics(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "/v1/topics")
        return result

    def topic(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", f"/v1/topics/{name}")
        return result

    def create_topic(
        self, name: str, queues: int = 8, message_type: str = "NORMAL"
    ) -> dict[str, Any]:
        body = {"name": name, "queues": queues, "messageType": message_type}
        result: dict[str, Any] = self._call("POST", "/v1/topics", json=body)
        return result

    def delete_topic(self, name: str) -> None:
        self._call("DELETE", f"/v1/topics/{name}")

    def groups(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "/v1/groups")
        return result

    def create_group(
        self, name: str, fifo: bool = False, max_delivery_attempts: int = 16
    ) -> dict[str, Any]:
        body = {"name": name, "fifo": fifo, "maxDeliveryAttempts": max_delivery_attempts}
        result: dict[str, Any] = self._call("POST", "/v1/groups", json=body)
        return result

    def delete_group(self, name: str) -> None:
        self._call("DELETE", f"/v1/groups/{name}")

    def offsets(self, group: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", f"/v1/groups/{group}/offsets")
        return result

    def reset_offset(self, group: str, topic: str, queue_id: int, offset: int) -> dict[str, Any]:
        body = {"topic": topic, "queueId": queue_id, "offset": offset}
        result: dict[str, Any] = self._call("PUT", f"/v1/groups/{group}/offsets", json=body)
        return result

    def message(self, message_id: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", f"/v1/messages/{message_id}")
        return result

    def messages_by_key(self, topic: str, key: str, limit: int = 32) -> list[dict[str, Any]]:
        params: dict[str, str | int] = {"topic": topic, "key": key, "limit": limit}
        result: list[dict[str, Any]] = self._call("GET", "/v1/messages", params=params)
        return result

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/v1/stats")
        return result

    def metrics(self) -> str:
        result: str = self._call("GET", "/metrics")
        return result
