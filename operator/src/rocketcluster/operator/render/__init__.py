"""Rendering: a RocketCluster spec in, the Kubernetes objects that run it out. Pure —
no API calls, no clock — so ``rocketctl render``, the tests and the operator all see
exactly the same objects."""

from rocketcluster.operator.render.cluster import RenderContext, render_cluster
from rocketcluster.operator.render.meta import K8sObject

__all__ = ["K8sObject", "RenderContext", "render_cluster"]
