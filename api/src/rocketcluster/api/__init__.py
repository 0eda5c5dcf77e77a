"""rocketcluster contracts: manifest models, naming rules, typed clients."""

from rocketcluster.api.names import dlq_topic, group_name_problem, retry_topic, topic_name_problem
from rocketcluster.api.topics import ConsumerGroupSpec, MessageType, TopicSpec, TraceMode

__all__ = [
    "ConsumerGroupSpec",
    "MessageType",
    "TopicSpec",
    "TraceMode",
    "dlq_topic",
    "group_name_problem",
    "retry_topic",
    "topic_name_problem",
]
