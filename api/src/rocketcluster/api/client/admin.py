"""AdminClient: the broker admin REST API, typed and with errors that say what failed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from rocketcluster.api.stats import STATS_FORMAT_VERSION, StatsFormatError, StatsSnapshot
from rocketcluster.api.tls import ClientTls, http_verify


class AdminError(RuntimeError):
    """A call the broker refused (``status``: its HTTP status, ``detail``: its reason)
    or that got no answer at all (``status`` 0, :attr:`unreachable`: nothing listens
    at the address, the connection broke or the call timed out)."""

    def __init__(self, method: str, url: str, status: int, detail: str) -> None:
        if status == 0:
            message = f"{method} {url}: the broker did not answer ({detail})"
        else:
            message = f"{method} {url} failed ({status}): {detail}"
        super().__init__(message)
        self.status = status
        self.detail = detail

    @property
    def unreachable(self) -> bool:
        return self.status == 0


@dataclass(frozen=True, slots=True)
class StoredSnapshot:
    """One stats snapshot message: its queue offset in the stats topic, its store time
    (epoch ms) and the snapshot (or a share of its rows, see api/stats.py)."""

    offset: int
    store_time: int
    snapshot: StatsSnapshot


@dataclass(frozen=True, slots=True)
class SnapshotPage:
    """A page of ``GET /v1/stats/snapshots``; ``skipped`` counts bodies the broker
    could not read as snapshots."""

    min_offset: int
    max_offset: int
    next_offset: int
    snapshots: list[StoredSnapshot]
    skipped: int


@dataclass(frozen=True, slots=True)
class TierFlush:
    """``POST /v1/tier/flush``: segments uploaded by this call; ``uploading`` is False on
    a slave (only the master uploads, so a slave's flush uploads nothing)."""

    segments: int
    uploading: bool


@dataclass(frozen=True, slots=True)
class RetentionRun:
    """``POST /v1/store/retention``: commit-log segments deleted and why, how many
    local retention wanted to delete but kept because the tier does not have their
    messages yet, and the commit log's first offset afterwards."""

    deleted_segments: int
    reasons: list[str]
    held_by_tier: int
    commit_log_min_offset: int


@dataclass(frozen=True, slots=True)
class QueueOffset:
    """The first offset of a queue stored at or after a time (the tier included), and
    the queue's range: ``max_offset`` when nothing is that recent."""

    offset: int
    min_offset: int
    max_offset: int


def _snapshot(raw: dict[str, Any]) -> StatsSnapshot:
    version = raw.get("v")
    if version != STATS_FORMAT_VERSION:
        raise StatsFormatError(
            f"stats format v{version} is not v{STATS_FORMAT_VERSION}: "
            "use the client library of the brokers' release"
        )
    try:
        return StatsSnapshot.model_validate(raw)
    except ValidationError as exc:
        raise StatsFormatError(f"stats snapshot does not match the format: {exc}") from exc


def segment(value: str) -> str:
    """``value`` as one URL path segment: a name holding ``/`` or being ``..`` stays
    one segment the server judges (and refuses), never a different path."""
    quoted = quote(value, safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


class AdminClient:
    def __init__(
        self,
        address: str,
        timeout: float = 10.0,
        *,
        tls: ClientTls | None = None,
        token: str | None = None,
    ) -> None:
        """``tls``: the CA to trust (the cluster's security.tls is on); ``token``: the
        admin token, sent as ``Authorization: Bearer`` (security.auth is on)."""
        scheme = "https" if tls is not None else "http"
        self.base = address if address.startswith("http") else f"{scheme}://{address}"
        headers = {"authorization": f"Bearer {token}"} if token else None
        self._http = httpx.Client(
            base_url=self.base, timeout=timeout, verify=http_verify(tls), headers=headers
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            answer = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            reason = str(exc) or type(exc).__name__  # httpx's timeouts may say nothing
            raise AdminError(method, self.base + path, 0, reason) from exc
        if answer.status_code >= 400:
            try:
                detail = answer.json().get("detail", answer.text)
            except ValueError:
                detail = answer.text
            raise AdminError(method, self.base + path, answer.status_code, str(detail))
        return answer

    def _all(self, path: str) -> list[dict[str, Any]]:
        """Every item of a paged listing: its pages followed by their ``Link: rel=next``
        (broker/admin/paging.py)."""
        items: list[dict[str, Any]] = []
        next_path: str | None = path
        while next_path is not None:
            answer = self._request("GET", next_path)
            items += answer.json()
            next_path = answer.links.get("next", {}).get("url")
        return items

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        answer = self._request(method, path, **kwargs)
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
        return self._all("/v1/topics")

    def queues(self) -> list[dict[str, Any]]:
        """Every queue of every topic with its offsets."""
        return self._all("/v1/queues")

    def consumption(self) -> list[dict[str, Any]]:
        """Every group's offsets and lag on every queue it consumed."""
        return self._all("/v1/consumption")

    def topic(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", f"/v1/topics/{segment(name)}")
        return result

    def create_topic(
        self, name: str, queues: int = 8, message_type: str = "NORMAL"
    ) -> dict[str, Any]:
        body = {"name": name, "queues": queues, "messageType": message_type}
        result: dict[str, Any] = self._call("POST", "/v1/topics", json=body)
        return result

    def delete_topic(self, name: str) -> None:
        self._call("DELETE", f"/v1/topics/{segment(name)}")

    def groups(self) -> list[dict[str, Any]]:
        return self._all("/v1/groups")

    def create_group(
        self, name: str, fifo: bool = False, max_delivery_attempts: int = 16
    ) -> dict[str, Any]:
        body = {"name": name, "fifo": fifo, "maxDeliveryAttempts": max_delivery_attempts}
        result: dict[str, Any] = self._call("POST", "/v1/groups", json=body)
        return result

    def delete_group(self, name: str) -> None:
        self._call("DELETE", f"/v1/groups/{segment(name)}")

    def offsets(self, group: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", f"/v1/groups/{segment(group)}/offsets")
        return result

    def reset_offset(self, group: str, topic: str, queue_id: int, offset: int) -> dict[str, Any]:
        body = {"topic": topic, "queueId": queue_id, "offset": offset}
        path = f"/v1/groups/{segment(group)}/offsets"
        result: dict[str, Any] = self._call("PUT", path, json=body)
        return result

    def message(self, message_id: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", f"/v1/messages/{segment(message_id)}")
        return result

    def message_trace(self, message_id: str) -> dict[str, Any]:
        """The trace events this broker holds of a message (GET /v1/messages/ID/trace):
        ``{"messageId", "events": [...by time], "traced": bool | None}``; AdminError
        404 when it holds neither the message nor any event of it."""
        result: dict[str, Any] = self._call("GET", f"/v1/messages/{segment(message_id)}/trace")
        return result

    def messages_by_key(self, topic: str, key: str, limit: int = 32) -> list[dict[str, Any]]:
        params: dict[str, str | int] = {"topic": topic, "key": key, "limit": limit}
        result: list[dict[str, Any]] = self._call("GET", "/v1/messages", params=params)
        return result

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/v1/stats")
        return result

    def stats_snapshots(self, from_offset: int = 0, limit: int = 100) -> SnapshotPage:
        """Snapshots this broker's group published, from queue offset ``from_offset``
        (at most ``limit``, 1..1000); continue with ``page.next_offset``."""
        params = {"fromOffset": from_offset, "limit": limit}
        raw: dict[str, Any] = self._call("GET", "/v1/stats/snapshots", params=params)
        return SnapshotPage(
            min_offset=int(raw["minOffset"]),
            max_offset=int(raw["maxOffset"]),
            next_offset=int(raw["nextOffset"]),
            snapshots=[
                StoredSnapshot(int(s["offset"]), int(s["storeTime"]), _snapshot(s["snapshot"]))
                for s in raw["snapshots"]
            ],
            skipped=int(raw.get("skipped", 0)),
        )

    def iter_stats_snapshots(
        self, from_offset: int = 0, until_offset: int | None = None, page_size: int = 100
    ) -> Iterator[StoredSnapshot]:
        """Every snapshot from ``from_offset`` up to ``until_offset`` (exclusive;
        default: the end when each page was read), page by page."""
        offset = from_offset
        while until_offset is None or offset < until_offset:
            limit = page_size if until_offset is None else min(page_size, until_offset - offset)
            page = self.stats_snapshots(offset, limit)
            for stored in page.snapshots:
                if until_offset is not None and stored.offset >= until_offset:
                    return
                yield stored
            if page.next_offset <= offset:
                return  # nothing more yet
            offset = page.next_offset

    def stats_offset(self, time_ms: int) -> int:
        """The first stats-topic offset stored at or after ``time_ms`` (epoch ms): where
        a reader of a time window starts."""
        raw: dict[str, Any] = self._call("GET", "/v1/stats/offset", params={"time": time_ms})
        return int(raw["offset"])

    # -- tiered storage and retention -------------------------------------------

    def tier_status(self) -> dict[str, Any]:
        """``GET /v1/tier`` as the broker answers it: ``{"enabled": False}``, or the
        backend, whether this broker uploads (the master), health and last error, upload
        lag (bytes, seconds), what the tier holds (overall and per queue), upload and
        read counters and remote retention."""
        result: dict[str, Any] = self._call("GET", "/v1/tier")
        return result

    def tier_flush(self) -> TierFlush:
        """Upload everything pending now (the master; a slave uploads nothing). An
        AdminError with status 409 when tiered storage is off, 503 when the backend
        fails."""
        raw: dict[str, Any] = self._call("POST", "/v1/tier/flush")
        return TierFlush(segments=int(raw["segments"]), uploading=bool(raw["uploading"]))

    def run_retention(self) -> RetentionRun:
        """Apply local retention now instead of at its next interval."""
        raw: dict[str, Any] = self._call("POST", "/v1/store/retention")
        return RetentionRun(
            deleted_segments=int(raw["deletedSegments"]),
            reasons=[str(r) for r in raw.get("reasons", [])],
            held_by_tier=int(raw.get("heldByTier", 0)),
            commit_log_min_offset=int(raw["commitLogMinOffset"]),
        )

    def queue_offset_for_time(self, topic: str, queue_id: int, time_ms: int) -> QueueOffset:
        """The first offset of ``topic``'s queue ``queue_id`` stored at or after
        ``time_ms`` (epoch ms), data only in the tier included: where a consumer group
        resets to for "from this time on"."""
        path = f"/v1/topics/{segment(topic)}/queues/{queue_id}/offset"
        raw: dict[str, Any] = self._call("GET", path, params={"time": time_ms})
        return QueueOffset(
            offset=int(raw["offset"]),
            min_offset=int(raw["minOffset"]),
            max_offset=int(raw["maxOffset"]),
        )

    def metrics(self) -> str:
        result: str = self._call("GET", "/metrics")
        return result
