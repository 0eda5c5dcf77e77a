"""Replication: epochs, the master's HA service, the slave's client, roles."""
