"""Front processes: the client port served by several processes (issue #28).

A broker is one store process — store, HA, POP state, tier, stats, admin — and, when
``frontProcesses`` is above 0, that many front processes sharing the client port
(``SO_REUSEPORT``: the kernel spreads connections over them). A front does what a call
costs that needs none of the store's state: gRPC and HTTP/2, TLS, admission and client
limits, the signature and ACL check, decoding the request. It hands the store process
the call over a Unix socket (``channel.py``) and answers the client with the store
process's reply, so it holds nothing the store process needs after a crash:

- ``frames``: the channel's frames and the table of relayed methods (pure);
- ``channel``: one end of a socket pair as an asyncio protocol, frames out coalesced
  per loop turn;
- ``relay``: the front's side — a servicer whose every method is a relayed call;
- ``host``: the store process's side — each relayed call run by the real servicers;
- ``supervisor``: the store process starts, restarts and stops its fronts;
- ``cores``: how many fronts ``auto`` means for the container's CPU quota;
- ``process``: ``python -m rocketcluster.broker.front``, one front.
"""
