"""What every case of the tier benchmark shares: the topic and the records it stores,
the names the tiers are stored under, and how the tier under test is configured. One
place for them, so that the in-process cases and the broker cases measure the same
thing.
"""

from __future__ import annotations

from dataclasses import dataclass

TOPIC = "bench"
QUEUES = 8
RECORD_BODY = 1024
PUT_BATCH = 32
CLUSTER = "bench"
BUCKET = "rc-bench-tier"
READ_AHEAD_BYTES = 16 << 20
# A tiered case writes untimed until the uploader's first upload is done, at most this
# long: the timed run measures the uploader at work, not its first backend write.
WARMUP_UPLOAD_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class TierSettings:
    """How the tier under test is configured."""

    upload_batch_bytes: int = 4 << 20
    upload_interval_s: float = 1.0
    read_ahead_bytes: int = READ_AHEAD_BYTES
