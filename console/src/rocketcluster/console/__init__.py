"""The rocketcluster console: server-rendered pages over the controllers' and brokers'
admin APIs (overview, topics and a message browser, consumer groups with offset
resets and DLQ resends, message traces, health reports)."""
