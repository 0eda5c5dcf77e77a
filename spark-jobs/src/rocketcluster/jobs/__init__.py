"""Spark health reports for a rocketcluster: consumer lag, SyncStateSet history, tiering candidates."""
