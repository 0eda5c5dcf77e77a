"""rocketcluster broker: store, messaging, replication."""
