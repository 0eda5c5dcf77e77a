"""Stats snapshots the master publishes to the stats topic (api/stats.py)."""

from rocketcluster.broker.stats.publisher import StatsPublisherService, StatsSources
from rocketcluster.broker.stats.reads import ReadRecorder

__all__ = ["ReadRecorder", "StatsPublisherService", "StatsSources"]
