"""TimerService: delay messages wait in the timer topic until their delivery time,
then a copy goes to their real topic and queue.

The schedule (delivery time → message) lives in LMDB, fed from the timer topic's
consume queue; an entry is removed only after its copy is stored, so a crash can at
worst deliver a delay message twice, never lose it or deliver it early. A recall
removes a not-yet-delivered entry.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import struct
import time
from collections.abc import Callable
from pathlib import Path

from rocketcluster.broker.messaging import properties as prop
from rocketcluster.broker.messaging.codes import Code, MessagingError
from rocketcluster.broker.messaging.convert import copy_to
from rocketcluster.broker.messaging.system_topic import SystemTopicLog, dumps, loads
from rocketcluster.broker.store import MessageStore
from rocketcluster.broker.store.record import SysFlag

log = logging.getLogger(__name__)

_KEY_TIME = struct.Struct(">Q")
MAX_SLEEP = 0.2
BATCH = 256


def encode_recall_handle(topic: str, message_id: str, deliver_ms: int) -> str:
    raw = f"{topic}\x00{message_id}\x00{deliver_ms}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_recall_handle(text: str) -> tuple[str, str, int]:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
        topic, message_id, deliver = raw.split("\x00")
        return topic, message_id, int(deliver)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MessagingError(Code.BAD_REQUEST, "recall handle is not valid") from exc


def _schedule_key(deliver_ms: int, message_id: str) -> bytes:
    return _KEY_TIME.pack(deliver_ms) + message_id.encode()


class TimerService:
    def __init__(
        self, store: MessageStore, directory: Path, active: Callable[[], bool] = lambda: True
    ) -> None:
        self._store = store
        self._active = active
        self._log = SystemTopicLog(directory, prop.TIMER_TOPIC, ["schedule", "by_id"])
        self._wake = asyncio.Event()
        self.delivered = 0

    def wake(self) -> None:
        self._wake.set()

    def ingest(self) -> int:
        """Move new timer-topic records into the schedule; returns how many."""
        messages, progress = self._log.unread(self._store)
        if not messages and progress == self._log.progress():
            return 0
        schedule, by_id = self._log.tables["schedule"], self._log.tables["by_id"]
        with self._log.env.begin(write=True) as txn:
            for msg in messages:
                deliver = int(msg.properties.get(prop.DELIVERY_TIMESTAMP, "0"))
                key = _schedule_key(deliver, msg.msg_id)
                value = {"offset": msg.physical_offset, "size": msg.size}
                txn.put(key, dumps(value), db=schedule)
                txn.put(msg.msg_id.encode(), key, db=by_id)
            txn.put(b"progress", str(progress).encode(), db=self._log.meta)
        return len(messages)

    def next_due_ms(self) -> int | None:
        with self._log.env.begin(db=self._log.tables["schedule"]) as txn:
            cursor = txn.cursor()
            if not cursor.first():
                return None
            return int(_KEY_TIME.unpack_from(cursor.key())[0])

    async def deliver_due(self) -> int:
        now = int(time.time() * 1000)
        due: list[tuple[bytes, dict[str, int]]] = []
        with self._log.env.begin(db=self._log.tables["schedule"]) as txn:
            for key, value in txn.cursor():
                if _KEY_TIME.unpack_from(key)[0] > now or len(due) >= BATCH:
                    break
                due.append((bytes(key), loads(value)))
        if not due:
            return 0
        copies = []
        for _key, where in due:
            msg = self._store.read_message(where["offset"], where["size"])
            topic = msg.properties.get(prop.REAL_TOPIC, "")
            qid = int(msg.properties.get(prop.REAL_QUEUE_ID, "0"))
            copies.append(
                copy_to(
                    msg,
                    topic,
                    qid,
                    drop=(prop.REAL_TOPIC, prop.REAL_QUEUE_ID),
                    sys_flag=SysFlag.DELAY,
                )
            )
        result = await self._store.put_batch(copies)
        if not result.ok:
            log.warning("delivering %d due delay messages failed: %s", len(copies), result.reason)
            return 0
        with self._log.env.begin(write=True) as txn:
            for key, _ in due:
                txn.delete(key, db=self._log.tables["schedule"])
                txn.delete(key[_KEY_TIME.size :], db=self._log.tables["by_id"])
        self.delivered += len(due)
        return len(due)

    def recall(self, topic: str, handle: str) -> str:
        handle_topic, message_id, deliver_ms = decode_recall_handle(handle)
        if topic and handle_topic != topic:
            raise MessagingError(Code.BAD_REQUEST, "recall handle belongs to another topic")
        self.ingest()
        key = _schedule_key(deliver_ms, message_id)
        with self._log.env.begin(write=True) as txn:
            if txn.get(key, db=self._log.tables["schedule"]) is None:
                raise MessagingError(
                    Code.NOT_FOUND, f"delay message {message_id} was delivered or recalled already"
                )
            txn.delete(key, db=self._log.tables["schedule"])
            txn.delete(message_id.encode(), db=self._log.tables["by_id"])
        return message_id

    def pending(self) -> int:
        with self._log.env.begin() as txn:
            return int(txn.stat(self._log.tables["schedule"])["entries"])

    async def run(self) -> None:
        """Ingest and deliver forever; sleeps until the next due time (at most 200 ms)."""
        while True:
            if not self._active():  # only the master delivers delay messages
                await asyncio.sleep(MAX_SLEEP)
                continue
            try:
                self.ingest()
                while await self.deliver_due():
                    pass
                nxt = self.next_due_ms()
            except Exception:
                log.exception("timer service step failed; retrying")
                nxt = None
            delay = MAX_SLEEP
            if nxt is not None:
                delay = min(MAX_SLEEP, max(0.0, (nxt - time.time() * 1000) / 1000))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()

    def close(self) -> None:
        self._log.close()
