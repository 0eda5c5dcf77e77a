"""The cases of the client benchmarks (``rocketctl bench produce|consume|clients``),
apart from ``client_bench`` so that building the command line does not import the
clients, gRPC and the official library (~0.6 s of CPU at every ``rocketctl`` start)."""

from __future__ import annotations

PRODUCE = ("lean_produce", "official_produce")
CONSUME = ("lean_consume", "official_consume")
