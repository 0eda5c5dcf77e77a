"""Orchestration as pure decisions: from what is observed now to the one next step
(restart this pod, hand over to that replica, wait, or stop and say why). The I/O
shell carries the step out and asks again on the next tick, so a restarted operator
resumes any roll from the cluster's own state."""
