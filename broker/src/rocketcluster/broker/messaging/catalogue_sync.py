"""CatalogueService: a broker follows the controllers' catalogue.

On a broker with controllers it polls ``GetCatalogue(known_version)`` every
``POLL_S`` (the first poll as it starts, right after registering) and applies each
new version:

- topics and consumer groups in the catalogue are created or updated in the
  registry, so they are servable here without a restart (consume queues appear with
  their first message, as for the config's topics). A queue count may grow, never
  shrink (that would strand stored messages: the larger count is kept and the refusal
  logged once); a message type or a group's delivery policy changes for new requests;
- a topic or group the previous catalogue had and this one does not is *retired*
  (no longer served; its spec, offsets and messages are kept) unless the broker's
  own config file declares it: the config is the bootstrap, always served;
- the broker groups become the route table (see :mod:`routes`), with this group's
  write flag.

The last catalogue applied is kept in the store's metadata, so a restart during a
controller outage serves what it served before; an outage, or controllers that do not
offer ``GetCatalogue`` yet (UNIMPLEMENTED), keep the last catalogue (or the config)
and are logged once, as is the recovery. Changes are logged one line each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol

from pydantic import ValidationError

from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.api.catalogue import Catalogue
from rocketcluster.api.client.controller import ControllerUnavailable
from rocketcluster.api.topics import ConsumerGroupSpec, TopicSpec
from rocketcluster.broker.messaging.registry import TopicRegistry
from rocketcluster.broker.messaging.routes import RouteTable
from rocketcluster.broker.store import MetadataStore

log = logging.getLogger(__name__)

POLL_S = 1.5
APPLIED_KEY = "catalogue/applied"
HELD_KEY = "catalogue/held-by-config"
LISTED_CHANGES = 10  # a version with more changes logs the first ones and a count


class CatalogueSource(Protocol):
    """Where catalogues come from: the controllers' leader (``ControllerClient``) in a
    broker, a fake in tests. ``None`` means ``known_version`` is still current; an
    outage raises :class:`ControllerUnavailable`."""

    async def get_catalogue(self, known_version: int = 0) -> Catalogue | None: ...


class CatalogueService:
    def __init__(
        self,
        config: BrokerProcessConfig,
        registry: TopicRegistry,
        metadata: MetadataStore,
        install: Callable[[RouteTable], None],
        source: CatalogueSource | None = None,
        *,
        poll_s: float = POLL_S,
    ) -> None:
        self._config = config
        self._registry = registry
        self._metadata = metadata
        self._install = install
        self._source = source
        self._poll_s = poll_s
        self.applied: Catalogue | None = None
        self.routes = RouteTable.from_config(config)
        self.outage: str | None = None  # why the last poll failed, until one succeeds
        self._refused_shrinks: dict[str, int] = {}
        self._failing = False  # a poll raised unexpectedly: logged once until one works
        self._task: asyncio.Task[None] | None = None
        self._bootstrap_topics = {t.name for t in config.topics}
        self._bootstrap_groups = {g.name for g in config.consumer_groups}
        # Names the catalogue dropped that only the config keeps served: retired once
        # the config (after a restart with a newer file) no longer declares them.
        saved = metadata.get_value(HELD_KEY)
        held = saved if isinstance(saved, dict) else {}
        self._held_topics: set[str] = set(held.get("topics", []))
        self._held_groups: set[str] = set(held.get("groups", []))

    # -- lifecycle -------------------------------------------------------------

    def restore(self) -> None:
        """Serve the last catalogue applied before a restart, over the config (which
        the registry applied first: for the names it lists, the catalogue wins); the
        config's routes when there is none."""
        saved = self._metadata.get_value(APPLIED_KEY)
        catalogue = None
        if isinstance(saved, dict):
            try:
                catalogue = Catalogue.model_validate(saved)
            except ValidationError as exc:
                log.warning("ignoring the saved catalogue (%s); waiting for the controllers", exc)
        if catalogue is None:
            self._install(self.routes)
            return
        log.info("serving the saved catalogue v%d until the controllers answer", catalogue.version)
        self.apply(catalogue)

    def start(self) -> None:
        """Poll the source (now, then every ``poll_s``); no-op without one."""
        if self._source is None or self._task is not None:
            return
        self._task = asyncio.get_running_loop().create_task(self._run(), name="catalogue-sync")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.poll_once()
                self._failing = False
            except asyncio.CancelledError:
                raise
            except Exception:
                if not self._failing:
                    log.exception("following the catalogue failed; retrying every poll")
                self._failing = True
            await asyncio.sleep(self._poll_s)

    async def poll_once(self) -> bool:
        """Ask for a newer catalogue and apply it; True if one was applied."""
        assert self._source is not None
        known = self.applied.version if self.applied is not None else 0
        try:
            catalogue = await self._source.get_catalogue(known)
        except ControllerUnavailable as exc:
            if self.outage is None:
                serving = (
                    f"catalogue v{self.applied.version}"
                    if self.applied is not None
                    else "the config's topics and routes"
                )
                log.warning(
                    "catalogue: controllers unavailable (%s); serving %s, retrying every %.1fs",
                    exc,
                    serving,
                    self._poll_s,
                )
            self.outage = str(exc)
            return False
        if self.outage is not None:
            log.info("catalogue: the controllers answer again")
            self.outage = None
        if catalogue is None or (self.applied is not None and catalogue == self.applied):
            return False
        self.apply(catalogue)
        return True

    # -- applying ----------------------------------------------------------------

    def apply(self, catalogue: Catalogue) -> list[str]:
        """Make ``catalogue`` what this broker serves; returns the changes (logged)."""
        previous = self.applied
        changes = self._apply_topics(previous, catalogue.topics)
        changes += self._apply_groups(previous, catalogue.consumer_groups)
        routes = RouteTable.from_catalogue(
            self._config, catalogue, own_writable=self.routes.writable
        )
        changes += route_changes(self.routes, routes)
        self.routes = routes
        self._install(routes)
        self._metadata.put_values(
            {
                APPLIED_KEY: catalogue.model_dump(mode="json", by_alias=True),
                HELD_KEY: {
                    "topics": sorted(self._held_topics),
                    "groups": sorted(self._held_groups),
                },
            }
        )
        self.applied = catalogue
        _log_changes(catalogue.version, changes)
        return changes

    def _apply_topics(self, previous: Catalogue | None, topics: list[TopicSpec]) -> list[str]:
        reg = self._registry
        changes = []
        puts: list[tuple[TopicSpec | None, TopicSpec | None, TopicSpec]] = []
        for topic in topics:
            served = reg.get_topic(topic.name)
            known = reg.known_topic(topic.name)
            wanted = reg.unshrunk(topic)
            if wanted is not topic:
                if self._refused_shrinks.get(topic.name) != topic.queues:
                    self._refused_shrinks[topic.name] = topic.queues
                    changes.append(
                        f"topic {topic.name}: keeping {wanted.queues} queues, not "
                        f"{topic.queues} (shrinking would strand stored messages)"
                    )
            else:
                self._refused_shrinks.pop(topic.name, None)
            if served != wanted:
                puts.append((served, known, wanted))
        # One metadata write for them all (a catalogue may bring thousands at once);
        # unshrunk above means none is refused.
        reg.put_topics([wanted for _, _, wanted in puts])
        changes += [_topic_change(served, known, wanted) for served, known, wanted in puts]
        before = [t.name for t in previous.topics] if previous else []
        for name in self._to_retire(before, topics, self._bootstrap_topics, self._held_topics):
            if reg.retire_topic(name):
                changes.append(
                    f"topic {name} retired (gone from the catalogue; its messages are kept)"
                )
        return changes

    def _apply_groups(
        self, previous: Catalogue | None, groups: list[ConsumerGroupSpec]
    ) -> list[str]:
        reg = self._registry
        changes = []
        retired = set(reg.retired_groups())
        puts = [(served, g) for g in groups if (served := reg.get_group(g.name)) != g]
        reg.put_groups([group for _, group in puts])  # one metadata write
        for served, group in puts:
            revived = served is None and group.name in retired
            if revived:
                changes.append(f"consumer group {group.name} served again, from its offsets")
            elif served is None:
                changes.append(f"consumer group {group.name} added ({_group_text(group)})")
            else:
                changes.append(
                    f"consumer group {group.name}: {_group_text(served)} -> {_group_text(group)}"
                )
        before = [g.name for g in previous.consumer_groups] if previous else []
        for name in self._to_retire(before, groups, self._bootstrap_groups, self._held_groups):
            if reg.retire_group(name):
                changes.append(
                    f"consumer group {name} retired (gone from the catalogue; offsets kept)"
                )
        return changes

    @staticmethod
    def _to_retire(
        before: list[str],
        listed: list[TopicSpec] | list[ConsumerGroupSpec],
        bootstrap: set[str],
        held: set[str],
    ) -> list[str]:
        """Names the previous catalogue had and this one has not (a name the catalogue
        never listed is not the catalogue's to take away), and names held by the config
        until now; those the config declares are held (updates ``held``)."""
        now = {x.name for x in listed}
        out = []
        for name in sorted({n for n in before if n not in now} | held):
            if name in now:
                held.discard(name)
            elif name in bootstrap:
                held.add(name)
            else:
                held.discard(name)
                out.append(name)
        return out

    def status(self) -> dict[str, object]:
        return {
            "version": self.routes.version,
            "source": self.routes.source,
            "writable": self.routes.writable,
            "routes": self.routes.describe(),
            "controllersUnavailable": self.outage,
            "retiredTopics": self._registry.retired_topics(),
            "retiredConsumerGroups": self._registry.retired_groups(),
        }


def _topic_text(t: TopicSpec) -> str:
    return f"{t.queues} queues, {t.message_type.value}"


def _topic_change(served: TopicSpec | None, known: TopicSpec | None, wanted: TopicSpec) -> str:
    if served is None and known is not None:
        return f"topic {wanted.name} served again ({_topic_text(wanted)})"
    if served is None:
        return f"topic {wanted.name} added ({_topic_text(wanted)})"
    return f"topic {wanted.name}: {_topic_text(served)} -> {_topic_text(wanted)}"


def _group_text(g: ConsumerGroupSpec) -> str:
    kind = "FIFO" if g.fifo else "concurrent"
    return f"{kind}, {g.max_delivery_attempts} attempts"


def route_changes(old: RouteTable, new: RouteTable) -> list[str]:
    """The differences between two route tables, as a person reads them."""
    changes = []
    for name, group in new.groups.items():
        before = old.groups.get(name)
        access = "" if group.writable else ", read-only"
        if before is None:
            changes.append(f"broker group {name} added to routes at {group.endpoint}{access}")
            continue
        if before.endpoint != group.endpoint:
            changes.append(f"broker group {name}: endpoint {before.endpoint} -> {group.endpoint}")
        if before.writable != group.writable:
            changes.append(
                f"broker group {name} is "
                + ("writable again" if group.writable else "read-only in routes (drained)")
            )
    for name in old.groups:
        if name not in new.groups:
            changes.append(f"broker group {name} removed from routes")
    if old.writable != new.writable:
        changes.append(
            "this group takes sends again"
            if new.writable
            else "this group is write-disabled: sends are refused, receives and acks go on"
        )
    return changes


def _log_changes(version: int, changes: list[str]) -> None:
    if not changes:
        log.debug("catalogue v%d applied (nothing changes here)", version)
        return
    for line in changes[:LISTED_CHANGES]:
        log.info("catalogue v%d: %s", version, line)
    if len(changes) > LISTED_CHANGES:
        log.info("catalogue v%d: … and %d more changes", version, len(changes) - LISTED_CHANGES)
