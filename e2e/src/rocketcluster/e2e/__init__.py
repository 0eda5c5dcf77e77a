"""Test support for the cross-component suites (never shipped in an image)."""
