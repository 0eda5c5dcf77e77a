"""Names of the properties the broker keeps with a stored message.

User properties share the record's property map with these system keys; a user
property may not use one (ILLEGAL_MESSAGE_PROPERTY_KEY), as in RocketMQ.
"""

from __future__ import annotations

from typing import Final

from rocketcluster.broker.store.record import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY

TAGS: Final = PROPERTY_TAGS
KEYS: Final = PROPERTY_KEYS
MESSAGE_ID: Final = PROPERTY_UNIQ_KEY
MESSAGE_GROUP: Final = "__SHARDINGKEY"
BORN_HOST: Final = "__BORNHOST"
DELIVERY_TIMESTAMP: Final = "__STARTDELIVERTIME"
TRACE_CONTEXT: Final = "__TRACE"
REAL_TOPIC: Final = "REAL_TOPIC"
REAL_QUEUE_ID: Final = "REAL_QID"
TRANSACTION_ID: Final = "__TRANSACTIONID"
PRODUCER_CLIENT: Final = "__PRODUCER"
ORIGIN_TOPIC: Final = "__ORIGIN_TOPIC"
ORIGIN_GROUP: Final = "__ORIGIN_GROUP"
DLQ_DELIVERY_ATTEMPTS: Final = "__DLQ_ATTEMPTS"
MESSAGE_TYPE: Final = "__MSGTYPE"
# A dead letter resent by the admin API (dead_letters.py) for one consumer group: every
# other group of its topic skips it, as a message its filter does not match.
RESEND_GROUP: Final = "__RESEND_GROUP"

RESERVED: Final = frozenset(
    {
        TAGS,
        KEYS,
        MESSAGE_ID,
        MESSAGE_GROUP,
        BORN_HOST,
        DELIVERY_TIMESTAMP,
        TRACE_CONTEXT,
        REAL_TOPIC,
        REAL_QUEUE_ID,
        TRANSACTION_ID,
        PRODUCER_CLIENT,
        ORIGIN_TOPIC,
        ORIGIN_GROUP,
        DLQ_DELIVERY_ATTEMPTS,
        MESSAGE_TYPE,
        RESEND_GROUP,
    }
)

# System topics: delay messages wait in the timer topic, transaction halves in the
# half topic, until they are copied to their real topic.
TIMER_TOPIC: Final = "RMQ_SYS_WHEEL_TIMER"
HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
