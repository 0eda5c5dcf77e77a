"""A Kubernetes API on this machine: the kmock emulator made faithful enough, and the
pod realiser that plays kubelet, the workload controllers and kube-proxy."""
