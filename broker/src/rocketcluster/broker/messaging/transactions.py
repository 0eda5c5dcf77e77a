"""TransactionService: half messages, their resolution, and orphan checks.

A transactional send stores a half message in the half topic; consumers never see
it. EndTransaction COMMIT stores a copy in the real topic (from then on deliverable)
and ROLLBACK drops it. A half message left unresolved is an orphan: after
``transaction_check_delay_ms`` and then every ``transaction_check_interval_ms`` the
broker asks a producer of its topic over the Telemetry stream (the one that sent it
first) to check it, up to ``transaction_check_max`` times; after that it is rolled
back. State lives in LMDB, fed from the half topic, so it survives restarts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from rocketcluster.api.broker_config import MessagingTuning
from rocketcluster.broker.messaging import properties as prop
from rocketcluster.broker.messaging.clients import ClientRegistry
from rocketcluster.broker.messaging.codes import Code, MessagingError
from rocketcluster.broker.messaging.convert import copy_to
from rocketcluster.broker.messaging.system_topic import SystemTopicLog, dumps, loads
from rocketcluster.broker.store import MessageStore, StoredMessage
from rocketcluster.broker.store.record import SysFlag

log = logging.getLogger(__name__)

PENDING = "PENDING"
COMMITTED = "COMMITTED"
ROLLED_BACK = "ROLLED_BACK"
CHECK_TICK = 0.5

OrphanMessage = Callable[[StoredMessage, str], pb.Message]


class TransactionService:
    def __init__(
        self,
        store: MessageStore,
        directory: Path,
        clients: ClientRegistry,
        tuning: MessagingTuning,
        orphan_message: OrphanMessage,
        active: Callable[[], bool] = lambda: True,
    ) -> None:
        self._active = active
        self._store = store
        self._log = SystemTopicLog(directory, prop.HALF_TOPIC, ["txns"])
        self._clients = clients
        self._tuning = tuning
        self._orphan_message = orphan_message
        self.checks_sent = 0
        self.rolled_back_unresolved = 0

    @property
    def _txns(self) -> Any:
        return self._log.tables["txns"]

    def ingest(self) -> int:
        messages, progress = self._log.unread(self._store)
        if not messages and progress == self._log.progress():
            return 0
        with self._log.env.begin(write=True) as txn:
            for msg in messages:
                txn_id = msg.properties.get(prop.TRANSACTION_ID, "")
                if not txn_id or txn.get(txn_id.encode(), db=self._txns) is not None:
                    continue
                record = {
                    "offset": msg.physical_offset,
                    "size": msg.size,
                    "topic": msg.properties.get(prop.REAL_TOPIC, ""),
                    "client": msg.properties.get(prop.PRODUCER_CLIENT, ""),
                    "message_id": msg.msg_id,
                    "state": PENDING,
                    "checks": 0,
                    "next_check_ms": msg.store_timestamp + self._tuning.transaction_check_delay_ms,
                }
                txn.put(txn_id.encode(), dumps(record), db=self._txns)
            txn.put(b"progress", str(progress).encode(), db=self._log.meta)
        return len(messages)

    def _get(self, txn_id: str) -> dict[str, Any] | None:
        with self._log.env.begin(db=self._txns) as txn:
            raw = txn.get(txn_id.encode())
        return None if raw is None else loads(raw)

    def _put(self, txn_id: str, record: dict[str, Any]) -> None:
        with self._log.env.begin(write=True, db=self._txns) as txn:
            txn.put(txn_id.encode(), dumps(record))

    async def end(self, txn_id: str, message_id: str, topic: str, resolution: int) -> None:
        """Resolve a transaction; repeating a resolution is harmless."""
        if resolution not in (pb.TransactionResolution.COMMIT, pb.TransactionResolution.ROLLBACK):
            # UNSPECIFIED: the producer does not know yet (a checker's answer, as
            # Java's UNKNOWN): nothing changes and the broker asks again later.
            return
        self.ingest()
        record = self._get(txn_id)
        if record is None:
            raise MessagingError(Code.INVALID_TRANSACTION_ID, f"unknown transaction {txn_id!r}")
        if message_id and record["message_id"] != message_id:
            raise MessagingError(
                Code.INVALID_TRANSACTION_ID,
                f"transaction {txn_id!r} is not for message {message_id!r}",
            )
        if topic and record["topic"] != topic:
            raise MessagingError(Code.INVALID_TRANSACTION_ID, "transaction is for another topic")
        if record["state"] != PENDING:
            return
        if resolution == pb.TransactionResolution.COMMIT:
            half = self._store.read_message(record["offset"], record["size"])
            qid = int(half.properties.get(prop.REAL_QUEUE_ID, "0"))
            copy = copy_to(
                half,
                record["topic"],
                qid,
                drop=(prop.REAL_TOPIC, prop.REAL_QUEUE_ID, prop.PRODUCER_CLIENT),
                sys_flag=SysFlag.TRANSACTION_COMMIT,
            )
            result = await self._store.put(copy)
            if not result.ok:
                raise MessagingError(Code.INTERNAL_SERVER_ERROR, f"commit failed: {result.reason}")
            record["state"] = COMMITTED
        else:
            record["state"] = ROLLED_BACK
        self._put(txn_id, record)

    def check_orphans(self) -> int:
        """Ask producers about transactions that stayed open; returns checks sent."""
        now = int(time.time() * 1000)
        due: list[tuple[str, dict[str, Any]]] = []
        with self._log.env.begin(db=self._txns) as txn:
            for key, value in txn.cursor():
                record = loads(value)
                if record["state"] == PENDING and record["next_check_ms"] <= now:
                    due.append((bytes(key).decode(), record))
        sent = 0
        for txn_id, record in due:
            if record["checks"] >= self._tuning.transaction_check_max:
                log.warning(
                    "transaction %s (message %s) unresolved after %d checks: rolled back",
                    txn_id,
                    record["message_id"],
                    record["checks"],
                )
                record["state"] = ROLLED_BACK
                self.rolled_back_unresolved += 1
                self._put(txn_id, record)
                continue
            session = self._clients.stream_for_topic(record["topic"], prefer=record["client"])
            record["next_check_ms"] = now + self._tuning.transaction_check_interval_ms
            if session is not None and session.outbox is not None:
                half = self._store.read_message(record["offset"], record["size"])
                command = spb.TelemetryCommand(
                    recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                        message=self._orphan_message(half, record["topic"]),
                        transaction_id=txn_id,
                    )
                )
                session.outbox.put_nowait(command)
                record["checks"] += 1
                sent += 1
            self._put(txn_id, record)
        self.checks_sent += sent
        return sent

    def forget_before(self, min_offset: int) -> int:
        """Drop resolved records whose half message retention removed."""
        dropped = 0
        with self._log.env.begin(write=True, db=self._txns) as txn:
            for key, value in list(txn.cursor()):
                record = loads(value)
                if record["state"] != PENDING and record["offset"] < min_offset:
                    txn.delete(key)
                    dropped += 1
        return dropped

    def counts(self) -> dict[str, int]:
        counts = {PENDING: 0, COMMITTED: 0, ROLLED_BACK: 0}
        with self._log.env.begin(db=self._txns) as txn:
            for _, value in txn.cursor():
                counts[loads(value)["state"]] += 1
        return counts

    async def run(self) -> None:
        while True:
            if not self._active():  # only the master resolves transactions
                await asyncio.sleep(CHECK_TICK)
                continue
            try:
                self.ingest()
                self.check_orphans()
            except Exception:
                log.exception("transaction service step failed; retrying")
            await asyncio.sleep(CHECK_TICK)

    def close(self) -> None:
        self._log.close()
