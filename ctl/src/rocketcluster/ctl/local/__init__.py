"""rocketctl local: a RocketCluster manifest run as plain processes on this machine."""
