"""The operator's end-to-end support: a RocketCluster driven the way users drive it
(kubectl against an API server), on the emulator + pod realiser here or on a real
cluster, and the checks the suite and ``make demo-operator`` share."""
