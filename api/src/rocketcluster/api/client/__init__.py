"""Typed clients of the broker (admin REST, lean messaging) and the controller."""
