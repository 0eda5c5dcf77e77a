"""Typed clients of the broker (admin REST, lean messaging) and the controller (its
gRPC API for brokers, its admin HTTP API for tools: controller_admin.py)."""
