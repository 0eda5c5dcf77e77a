"""What the official RocketMQ client complained about, counted by kind.

During a failover the official client (``rocketmq-python-client``) logs every failed
send, heartbeat and route query, and re-raises a failed heartbeat inside a future's
done-callback, which ``concurrent.futures`` prints as a traceback per heartbeat. A
person watching a demo should see one line - how many, of which kind - not pages of
tracebacks or a first line cut at 120 characters. The pure part names the kind of an
error (a gRPC status, a RocketMQ status code, an exception class); the thin part is a
logging handler and filter that count the client's records while a block runs.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType

import grpc
from rocketmq.grpc_protocol import definition_pb2

__all__ = [
    "CLIENT_LOGGER",
    "ClientErrorTally",
    "capture_client_errors",
    "error_kind",
    "kind_of_text",
    "operation_of_text",
    "summarise",
]

CLIENT_LOGGER = "rocketmq-python-client"
# Loggers through which the client's callback tracebacks surface; only records whose
# traceback passes through the client's own files are taken from them.
_CALLBACK_LOGGERS = ("concurrent.futures", "asyncio")
_CLIENT_FILES = "rocketmq/v5/"

_STATUS = re.compile(r"StatusCode\.([A-Z_]+)")
# ClientException prints as "<code>, <message>"; the client's own lines say "code:<n>".
_CODE = re.compile(r"(?:^|e: |code:\s*)(\d{5})\b")
_ERRNO = re.compile(r"\[Errno \d+\] ([^\]\n]+)")

# (what the client was doing, a phrase its log line contains), first match wins.
_OPERATIONS = (
    ("heartbeat", "heartbeat"),
    ("telemetry stream", "read stream"),
    ("route query", "query topic"),
    ("route query", "route"),
    ("settings", "send setting"),
    ("send", "send message"),
    ("receive", "receive message"),
    ("ack", "ack message"),
    ("startup", "startup"),
    ("shutdown", "shutdown"),
)
# Lines the client logs beside a failure it also logs with the error itself (a send
# that ran out of attempts is logged twice): counting them would count it twice.
_ECHOES = ("because of run out of attempt times",)


def _code_name(code: int) -> str:
    try:
        return str(definition_pb2.Code.Name(code))
    except ValueError:
        return f"code {code}"


def error_kind(exc: BaseException) -> str:
    """The kind of an exception the client raised: the gRPC status name, the RocketMQ
    status code's name, or the exception's class name."""
    if isinstance(exc, grpc.RpcError):
        code = getattr(exc, "code", None)
        status = code() if callable(code) else None
        if isinstance(status, grpc.StatusCode):
            return str(status.name)
    code = getattr(exc, "code", None)
    if isinstance(code, int) and not isinstance(code, bool):
        return _code_name(code)
    return type(exc).__name__


def kind_of_text(text: str) -> str:
    """The kind of error one of the client's log lines reports (it logs the error's
    text, not the error): ``"other"`` when the line names none."""
    if found := _STATUS.search(text):
        return found.group(1)
    if found := _CODE.search(text):
        return _code_name(int(found.group(1)))
    if found := _ERRNO.search(text):
        return found.group(1).strip()
    return "other"


def operation_of_text(text: str) -> str:
    """What the client was doing when it logged ``text``."""
    lowered = text.lower()
    for operation, phrase in _OPERATIONS:
        if phrase in lowered:
            return operation
    return "other"


def summarise(counts: Mapping[str, int]) -> str:
    """``{"UNAVAILABLE": 10, "DEADLINE_EXCEEDED": 2}`` -> ``"UNAVAILABLE x10,
    DEADLINE_EXCEEDED x2"``: the most frequent first."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{kind} x{n:,}" for kind, n in ranked if n > 0)


@dataclass
class ClientErrorTally:
    """Counts by ``"<operation> <kind>"`` and the first whole message of each, so the
    JSON report can show one untruncated example per kind; the client's threads add
    to it concurrently."""

    counts: Counter[str] = field(default_factory=Counter)
    levels: Counter[str] = field(default_factory=Counter)  # "error" / "warning" -> count
    examples: dict[str, str] = field(default_factory=dict)
    tracebacks_hidden: int = 0
    log_file: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def add(self, key: str, message: str, level: str = "error") -> None:
        with self._lock:
            self.counts[key] += 1
            self.levels[level] += 1
            self.examples.setdefault(key, message)

    def hide_traceback(self) -> None:
        with self._lock:
            self.tracebacks_hidden += 1

    def add_text(self, text: str, level: str = "error") -> None:
        if any(echo in text for echo in _ECHOES):
            return
        self.add(f"{operation_of_text(text)} {kind_of_text(text)}", text, level)

    def add_exception(self, exc: BaseException, context: str, level: str = "error") -> None:
        key = f"{operation_of_text(context)} {error_kind(exc)}"
        self.add(key, f"{context}: {exc}", level)

    def report(self) -> dict[str, object]:
        return {
            "total": self.total,
            "levels": dict(self.levels),
            "kinds": dict(sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))),
            "examples": dict(self.examples),
            "callbackTracebacksHidden": self.tracebacks_hidden,
            "clientLog": self.log_file,
        }


class _TallyHandler(logging.Handler):
    """Counts the client's warnings and errors (its own file handler still writes them
    to its log file, whole)."""

    def __init__(self, tally: ClientErrorTally) -> None:
        super().__init__(level=logging.WARNING)
        self.tally = tally

    def emit(self, record: logging.LogRecord) -> None:
        level = "error" if record.levelno >= logging.ERROR else "warning"
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None:
            self.tally.add_exception(exc, record.getMessage(), level)
        else:
            self.tally.add_text(record.getMessage(), level)


def _through_client(tb: TracebackType | None) -> bool:
    while tb is not None:
        if _CLIENT_FILES in tb.tb_frame.f_code.co_filename.replace("\\", "/"):
            return True
        tb = tb.tb_next
    return False


class _CallbackTracebackFilter(logging.Filter):
    """Holds back the tracebacks of the client's failing callbacks; every other record
    passes. They are not counted as errors: the client logged each error itself before
    re-raising it (5.1.x does so in its heartbeat callback)."""

    def __init__(self, tally: ClientErrorTally) -> None:
        super().__init__()
        self.tally = tally

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.exc_info or not _through_client(record.exc_info[2]):
            return True
        self.tally.hide_traceback()
        return False


def _client_log_file(logger: logging.Logger) -> str | None:
    for handler in logger.handlers:
        if isinstance(handler, logging.FileHandler):
            return handler.baseFilename
    return None


@contextlib.contextmanager
def capture_client_errors() -> Iterator[ClientErrorTally]:
    """Count what the official client logs while the block runs, and keep its callback
    tracebacks off the terminal; everything is put back as it was afterwards."""
    # Importing the client configures its logger (and drops handlers already on it):
    # do that first, then attach.
    import rocketmq.v5.log  # noqa: F401

    tally = ClientErrorTally()
    client = logging.getLogger(CLIENT_LOGGER)
    tally.log_file = _client_log_file(client)
    handler = _TallyHandler(tally)
    noise = _CallbackTracebackFilter(tally)
    client.addHandler(handler)
    for name in _CALLBACK_LOGGERS:
        logging.getLogger(name).addFilter(noise)
    try:
        yield tally
    finally:
        client.removeHandler(handler)
        for name in _CALLBACK_LOGGERS:
            logging.getLogger(name).removeFilter(noise)
