"""LeanWorkload: heavy produce with the lean client, from a thread, seen from outside.

Several batches in flight on one channel; a failed request is tried again with the
same message ids, as the official client does (the broker stores a retried id once),
so ``errors`` counts only what an application would see. Every acknowledgement is kept
for the audit, every request's duration for the latency report — what the switchover
benchmark and the failover tests need beside the official-client ``Workload``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.api.client.lean import LeanClient, OutgoingMessage, new_message_id
from rocketcluster.ctl.workload import TOPIC

BODY = b"r" * 512
RETRY_PAUSE_S = 0.1


@dataclass
class LeanWorkload:
    endpoint: str
    batch: int = 16
    inflight: int = 2
    attempts: int = 3
    timeout: float = 5.0
    acked: dict[str, float] = field(default_factory=dict)
    failures: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)  # error text -> count
    sends: list[tuple[float, float]] = field(default_factory=list)  # (done at, seconds)
    retried: int = 0  # requests that failed once and were tried again
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    async def _main(self) -> None:
        async with LeanClient(self.endpoint, timeout=self.timeout) as client:
            await asyncio.gather(*(self._worker(client) for _ in range(self.inflight)))

    async def _worker(self, client: LeanClient) -> None:
        while not self._stop.is_set():
            pending = [
                OutgoingMessage(BODY, message_id=new_message_id()) for _ in range(self.batch)
            ]
            started = time.time()
            error = ""
            for attempt in range(1, self.attempts + 1):
                if attempt > 1:
                    self.retried += 1
                    await asyncio.sleep(RETRY_PAUSE_S * attempt)
                try:
                    entries = await client.send(TOPIC, pending)
                except Exception as exc:
                    error = failure_text(exc)
                    continue
                now = time.time()
                failed = set()
                for entry in entries:
                    if entry.status.code == pb.Code.OK:
                        self.acked[entry.message_id] = now
                    else:
                        failed.add(entry.message_id)
                        error = entry.status.message[:120]
                pending = [m for m in pending if m.message_id in failed]
                if not pending:
                    self.sends.append((now, now - started))
                    break
            else:
                self.failures.append(time.time())
                self.errors[error] = self.errors.get(error, 0) + len(pending)


def failure_text(exc: BaseException) -> str:
    """What a failed request says, in a line: a gRPC error's status and details (its
    ``str`` starts with a line that names neither), else the exception's first line."""
    if isinstance(exc, grpc.RpcError):
        code, details = getattr(exc, "code", None), getattr(exc, "details", None)
        status = code() if callable(code) else None
        if isinstance(status, grpc.StatusCode):
            said = details() if callable(details) else ""
            return f"{status.name}: {said}"[:120]
    first = str(exc).splitlines()
    return (first[0] if first else type(exc).__name__)[:120]
