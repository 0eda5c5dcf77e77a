"""Naming rules shared by every component (RocketMQ's topic and group rules)."""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import AfterValidator

MAX_TOPIC_LENGTH: Final = 127
# fullmatch, not ``^…$``: ``$`` also matches before a trailing newline ("t\n").
_NAME_PATTERN: Final = re.compile(r"[%|a-zA-Z0-9_-]+")
RETRY_PREFIX: Final = "%RETRY%"
DLQ_PREFIX: Final = "%DLQ%"
SYSTEM_TOPIC_PREFIX: Final = "RMQ_SYS_"
# A group's retry and dead-letter topics (%RETRY%<group>, %DLQ%<group>) are topics:
# the group name must leave room for the prefix (Java allows 255, and then cannot
# dead-letter for a long name).
MAX_GROUP_LENGTH: Final = MAX_TOPIC_LENGTH - len(RETRY_PREFIX)
# What one file name may hold on the file systems brokers use (NAME_MAX).
MAX_PATH_COMPONENT_BYTES: Final = 255
CONTROL_CHARACTERS: Final = re.compile(r"[\x00-\x1f\x7f]")
KEY_FORBIDDEN: Final = re.compile(r"[\x00-\x20\x7f]")  # control characters and space


def topic_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid topic name, or None."""
    return _problem(name, MAX_TOPIC_LENGTH)


def group_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid consumer group name, or None (its %RETRY% and %DLQ%
    topics must be valid topic names)."""
    return _problem(name, MAX_GROUP_LENGTH)


def _problem(name: str, max_length: int) -> str | None:
    if not name:
        return "the name is empty"
    if len(name.encode()) > max_length:
        return f"the name is longer than {max_length} bytes"
    if not _NAME_PATTERN.fullmatch(name):
        return "only letters, digits, '%', '|', '_' and '-' are allowed"
    return None


def control_character_problem(text: str) -> str | None:
    """Why ``text`` (a key, tag, message group, property) may not be stored, or None:
    NUL and other control characters never reach logs, indexes or file names."""
    found = CONTROL_CHARACTERS.search(text)
    if found is None:
        return None
    return f"control character {found.group()!r} at position {found.start()}"


def path_component_problem(name: str) -> str | None:
    """Why ``name`` cannot be one file or directory name, or None: the store's last
    line of defence where a name becomes a path (validated names always pass)."""
    if not name or name in (".", ".."):
        return f"{name!r} is not a file name"
    if "/" in name or "\\" in name:
        return f"{name!r} contains a path separator"
    control = control_character_problem(name)
    if control:
        return f"{name!r} contains a {control}"
    if len(name.encode()) > MAX_PATH_COMPONENT_BYTES:
        return f"{name!r} is longer than {MAX_PATH_COMPONENT_BYTES} bytes"
    return None


def _valid_topic(name: str) -> str:
    problem = topic_name_problem(name)
    if problem:
        raise ValueError(f"topic {name!r}: {problem}")
    return name


def _valid_group(name: str) -> str:
    problem = group_name_problem(name)
    if problem:
        raise ValueError(f"consumer group {name!r}: {problem}")
    return name


def _valid_key(key: str) -> str:
    if not key.strip() or len(key) > MAX_PATH_COMPONENT_BYTES or KEY_FORBIDDEN.search(key):
        raise ValueError(
            f"message key {key[:MAX_PATH_COMPONENT_BYTES]!r}: not blank, no whitespace or "
            f"control characters, at most {MAX_PATH_COMPONENT_BYTES} characters"
        )
    return key


def _valid_message_id(message_id: str) -> str:
    if not message_id or len(message_id) > 128 or CONTROL_CHARACTERS.search(message_id):
        raise ValueError(f"message id {message_id[:128]!r}: 1 to 128 printable characters")
    return message_id


# Types for names wherever they enter (REST paths, queries and bodies; pydantic
# models): a bad name is refused with the rule it breaks.
TopicName = Annotated[str, AfterValidator(_valid_topic)]
GroupName = Annotated[str, AfterValidator(_valid_group)]
MessageKey = Annotated[str, AfterValidator(_valid_key)]
MessageId = Annotated[str, AfterValidator(_valid_message_id)]


def dlq_topic(group: str) -> str:
    return f"{DLQ_PREFIX}{group}"


def retry_topic(group: str) -> str:
    return f"{RETRY_PREFIX}{group}"
