"""Bounds on filter expressions, because subscribers are untrusted input.

A filter is compiled once per subscription but evaluated for every candidate message,
and parsing recurses; both costs must stay bounded whatever a client sends.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FilterLimits:
    """`max_length` in characters; `max_depth` counts nested parentheses and NOTs."""

    max_length: int = 4096
    max_depth: int = 64


DEFAULT_LIMITS = FilterLimits()
