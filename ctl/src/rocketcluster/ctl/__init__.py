"""rocketctl: the rocketcluster command line."""
