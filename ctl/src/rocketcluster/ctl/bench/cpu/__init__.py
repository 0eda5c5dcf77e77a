"""``rocketctl bench cpu``: CPU microseconds per message of every process role
(master, each slave, controllers, group endpoint proxy, the client) in the standalone
and replicated produce cases, lean consume, the ceilings beside them, NATS JetStream R3
beside ours, elections seen during load, failover recovery and py-spy flame graphs.

On a 2-core machine CPU per message *is* throughput, and wall-clock rates are noisy
when the machine is shared: CPU seconds from /proc/<pid>/stat over a fixed window,
divided by the messages carried in it, is the figure to compare before and after."""
