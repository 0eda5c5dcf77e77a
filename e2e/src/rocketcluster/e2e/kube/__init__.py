"""A Kubernetes API on this machine: the kmock emulator made faithful enough, and the pod realiser."""
