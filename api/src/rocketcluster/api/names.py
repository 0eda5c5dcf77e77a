"""Naming rules shared by every component (RocketMQ's topic and group rules)."""

from __future__ import annotations

import re
from typing import Final

MAX_TOPIC_LENGTH: Final = 127
MAX_GROUP_LENGTH: Final = 255
_NAME_PATTERN: Final = re.compile(r"^[%|a-zA-Z0-9_-]+$")
RETRY_PREFIX: Final = "%RETRY%"
DLQ_PREFIX: Final = "%DLQ%"
SYSTEM_TOPIC_PREFIX: Final = "RMQ_SYS_"


def topic_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid topic name, or None."""
    return _problem(name, MAX_TOPIC_LENGTH)


def group_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid consumer group name, or None."""
    return _problem(name, MAX_GROUP_LENGTH)


def _problem(name: str, max_length: int) -> str | None:
    if not name:
        return "the name is empty"
    if len(name.encode()) > max_length:
        return f"the name is longer than {max_length} bytes"
    if not _NAME_PATTERN.match(name):
        return "only letters, digits, '%', '|', '_' and '-' are allowed"
    return None


def dlq_topic(group: str) -> str:
    return f"{DLQ_PREFIX}{group}"


def retry_topic(group: str) -> str:
    return f"{RETRY_PREFIX}{group}"
