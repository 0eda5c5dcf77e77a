"""rocketcluster operator: renders a RocketCluster into Kubernetes objects and runs it."""
