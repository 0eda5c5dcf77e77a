"""Spark health reports of a rocketcluster: consumer lag, SyncStateSet history and
tiering candidates, from the stats the brokers publish and the controllers' history."""
