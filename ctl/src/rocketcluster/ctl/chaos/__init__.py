"""The chaos suite: faults in network namespaces, a recorded workload, a checker."""

from rocketcluster.ctl.chaos.checker import check
from rocketcluster.ctl.chaos.faults import FaultKind, FaultSpec, Target
from rocketcluster.ctl.chaos.history import History, read_history

__all__ = ["FaultKind", "FaultSpec", "History", "Target", "check", "read_history"]
