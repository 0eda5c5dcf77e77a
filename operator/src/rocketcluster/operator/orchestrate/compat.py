"""The feature gate: what the operator may write that only newer controller or broker
code understands (api/features.py), from what every member reports.

During a roll some members run the previous release. They must never meet a catalogue
command they do not know (a Raft entry the newer members apply and they do not: the
catalogues diverge, and one of them leading later makes the brokers retire topics),
a topic field they refuse (a whole catalogue or config refused), or a broker setting
they refuse. So:

- A feature opens when every member answers with it, and closes only when a member
  that answers lacks it (a downgrade). A member that does not answer (restarting,
  being replaced) leaves the gate as it was.
- The gate is kept in ``status.features``: without that, a broker missing one tick
  would flip what is rendered, change the pod hash and roll the group.
- A part with no member yet is open: its pods will run the desired image.

Which members count: the controllers for the catalogue batch; every controller and
every broker for a topic's ``trace`` (brokers read the catalogue whole); a group's
brokers for its ``frontProcesses``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rocketcluster.api.cluster import DiskFullPolicy, RocketCluster
from rocketcluster.api.features import SUPPORTED, Feature
from rocketcluster.api.status import FeaturesStatus, GroupFeatures
from rocketcluster.api.topics import TraceMode

# A member's features as it answered; None: it did not answer.
Report = frozenset[str] | None


@dataclass(frozen=True)
class Reports:
    """One tick's answers: per controller member, and per broker group per pod (a
    group with no pod has an empty tuple)."""

    controllers: tuple[Report, ...] = ()
    groups: Mapping[str, tuple[Report, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Gate:
    """The features the operator may use: of the controllers, and of each group's
    brokers (a group not listed has no pod yet: open)."""

    controllers: frozenset[str] = SUPPORTED
    groups: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def of_group(self, group: str) -> frozenset[str]:
        return self.groups.get(group, SUPPORTED)

    @property
    def catalogue_batch(self) -> bool:
        """PutCatalogueEntries: only controllers apply catalogue commands."""
        return Feature.CATALOGUE_BATCH in self.controllers

    @property
    def topic_trace(self) -> bool:
        """A topic's ``trace`` in the catalogue: the controllers validate it, every
        broker reads the catalogue whole."""
        return Feature.TOPIC_TRACE in self.controllers and all(
            Feature.TOPIC_TRACE in features for features in self.groups.values()
        )

    def front_processes(self, group: str) -> bool:
        return Feature.FRONT_PROCESSES in self.of_group(group)

    def status(self) -> FeaturesStatus:
        return FeaturesStatus(
            controllers=sorted(self.controllers),
            groups=[
                GroupFeatures(name=name, features=sorted(features))
                for name, features in sorted(self.groups.items())
            ],
        )

    @classmethod
    def from_status(cls, status: FeaturesStatus) -> Gate:
        return cls(
            frozenset(status.controllers),
            {g.name: frozenset(g.features) for g in status.groups},
        )


def persisted(status: Mapping[str, Any] | None) -> Gate | None:
    """The gate a RocketCluster's status keeps; None when none was written yet."""
    features = (status or {}).get("features")
    if not isinstance(features, Mapping):
        return None
    return Gate.from_status(FeaturesStatus.model_validate(features))


def gate(reports: Reports, before: Gate | None) -> Gate:
    """This tick's gate, from the members' answers and the gate kept in status (None:
    none kept yet; then a member that does not answer keeps a feature closed)."""
    return Gate(
        _part(reports.controllers, before.controllers if before is not None else None),
        {
            name: _part(
                answers,
                before.groups.get(name) if before is not None and name in before.groups else None,
            )
            for name, answers in reports.groups.items()
        },
    )


def _all(reports: Iterable[frozenset[str]]) -> frozenset[str]:
    common = SUPPORTED
    for report in reports:
        common &= report
    return common


def _part(reports: tuple[Report, ...], before: frozenset[str] | None) -> frozenset[str]:
    if not reports:  # no member yet: it will run the desired image
        return before if before is not None else SUPPORTED
    answered = [r for r in reports if r is not None]
    lacking = SUPPORTED - _all(answered)  # some member that answers lacks these
    everyone = _all(answered) if len(answered) == len(reports) else frozenset()
    kept = before if before is not None else frozenset()
    return ((kept | everyone) - lacking) & SUPPORTED


def understood(spec: dict[str, Any], features: Gate) -> dict[str, Any]:
    """A topic's catalogue spec (``canonical_spec``) as every member understands it:
    without ``trace`` until every controller and broker does. Applied to both the
    manifest's and the catalogue's side of a comparison, so nothing is put again
    while the gate stays closed, and the full spec is put once it opens."""
    if "trace" not in spec or features.topic_trace:
        return spec
    return {k: v for k, v in spec.items() if k != "trace"}


def withheld(spec: dict[str, Any], features: Gate) -> bool:
    """The topic spec has what ``understood`` leaves out for now."""
    return understood(spec, features) is not spec


def for_group(cluster: RocketCluster, features: Gate, group: str) -> RocketCluster:
    """The spec a group's objects are rendered from: a number of front processes only
    once every broker of the group reports ``front-processes`` (left out until then:
    ``auto``, which older brokers read as nothing), likewise ``diskFull:
    deleteOldest`` until ``disk-full-policy``, and the manifest's topics in its
    brokers' bootstrap config without ``trace`` until they report ``topic-trace``."""
    understood_by = features.of_group(group)
    brokers = cluster.spec.brokers
    spec_update: dict[str, Any] = {}
    brokers_update: dict[str, Any] = {}
    if Feature.FRONT_PROCESSES not in understood_by and brokers.front_processes != "auto":
        brokers_update["front_processes"] = "auto"
    if Feature.DISK_FULL_POLICY not in understood_by and brokers.disk_full != DiskFullPolicy.REJECT:
        # Left out (the default is not rendered): an older broker deletes the oldest
        # segments of a full disk anyway, which is what deleteOldest asks.
        brokers_update["disk_full"] = DiskFullPolicy.REJECT
    if brokers_update:
        spec_update["brokers"] = brokers.model_copy(update=brokers_update)
    if Feature.TOPIC_TRACE not in understood_by and any(
        t.trace is not TraceMode.SAMPLED for t in cluster.spec.topics
    ):
        spec_update["topics"] = [
            t.model_copy(update={"trace": TraceMode.SAMPLED}) for t in cluster.spec.topics
        ]
    if not spec_update:
        return cluster
    return cluster.model_copy(update={"spec": cluster.spec.model_copy(update=spec_update)})
