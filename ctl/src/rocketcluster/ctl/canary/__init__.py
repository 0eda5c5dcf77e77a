"""The canary: ``rocketctl canary`` sends a message through each broker group's client
endpoint every few seconds, receives it back, and exports what it saw per group
(end-to-end latency, probe results, success ratio) on ``/metrics``.

It runs where applications run — a Deployment from the brokers' image beside the
cluster (``spec.canary``), or beside a local cluster (``--dir``) — and needs nothing
from the operator while it runs: it keeps measuring while the operator is down or
changing leader.

- :mod:`.probe`: one group's probe loop and the metrics;
- :mod:`.runner`: the groups of the config file (re-read when it changes), and the
  HTTP endpoints;
- :mod:`.cli`: the command, and the config for a local cluster.
"""
