"""rocketcluster controller: Raft among members, the SyncStateSet state machine, routes."""
