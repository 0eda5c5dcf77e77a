"""The operator's own small Kubernetes client: connection settings, typed errors,
and the one write adapter every object goes through."""
