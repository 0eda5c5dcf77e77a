"""What a controller or broker process understands beyond the previous release, as it
reports it (``features`` and ``release`` in the controllers' ``/v1/cluster`` and the
brokers' ``/v1/broker``).

The operator writes what only newer code reads — a catalogue command, a field of a
topic, a setting of a broker's config — only once every process that would read it
reports the feature (the operator's gate, ``orchestrate/compat.py``). Older code meets
such things as an unknown Raft command (applied by nobody but the newer members: the
catalogues diverge) or an unknown field (refused: pydantic's ``extra="forbid"``).

A process that reports no list is the previous release: it understands none of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final


class Feature(StrEnum):
    # The PutCatalogueEntries command (POST /v1/catalogue/entries): a member without it
    # fails the command in Raft order and keeps its catalogue as it was.
    CATALOGUE_BATCH = "catalogue-batch"
    # TopicSpec.trace: a catalogue or a config holding it is refused whole by older code.
    TOPIC_TRACE = "topic-trace"
    # BrokerProcessConfig.frontProcesses as a number (older brokers refuse the field).
    FRONT_PROCESSES = "front-processes"
    # BrokerProcessConfig.diskFull other than its default (older brokers refuse the
    # field; they delete the oldest segments when full, as deleteOldest does).
    DISK_FULL_POLICY = "disk-full-policy"
    # The process reports this list at all.
    FEATURES = "features"


# This release's code (controller and broker alike) understands every feature above.
SUPPORTED: Final = frozenset(Feature)


def _release() -> str:
    try:
        return version("rocketcluster-api")
    except PackageNotFoundError:  # a source tree run without installing it
        return "unknown"


RELEASE: Final = _release()


def advertised() -> dict[str, Any]:
    """The fields a controller's ``/v1/cluster`` and a broker's ``/v1/broker`` add."""
    return {"features": sorted(f.value for f in SUPPORTED), "release": RELEASE}


def reported(answer: Mapping[str, Any]) -> frozenset[str]:
    """The features an admin answer reports: none from the previous release, which
    reports no list."""
    features = answer.get("features")
    if not isinstance(features, list):
        return frozenset()
    return frozenset(str(f) for f in features)
