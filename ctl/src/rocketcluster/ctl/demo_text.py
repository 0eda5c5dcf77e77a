"""The demos' reports as a few readable lines (the JSON stays behind ``--json``)."""

from __future__ import annotations

from typing import Any


def cluster_lines(r: dict[str, Any]) -> list[str]:
    election = r.get("election") or {}
    lines = [
        f"cluster {r['cluster']}: {r['processes']} processes; clients connect to "
        + ", ".join(f"{g} at {e}" for g, e in r["groupEndpoints"].items()),
        f"killed master {r['killed']['name']} with {r['killed']['signal']} under load",
        f"controllers elected {r['newMaster']}; serving after {r['newMasterServingAfterSeconds']}s"
        + (f" ({election.get('reason', '')})" if election else ""),
        f"the official client recovered in {r['clientRecoverySeconds']}s "
        f"({r['clientErrorsDuringFailover']} send errors during the failover)",
        f"acknowledged {r['acknowledged']}, audited {r['audited']}, lost {r['lost']}, "
        f"delivered at two offsets {r['deliveredAtTwoOffsets']}",
        f"verdict: {r['verdict']}",
    ]
    return lines


def standalone_lines(r: dict[str, Any]) -> list[str]:
    lookup = r["lookupById"]
    return [
        f"cluster {r['cluster']}: clients connect to {r['clientEndpoints']}",
        f"produced {r['produced']} messages in {r['produceSeconds']}s with the official client",
        f"consumed and acknowledged {r['consumedAndAcked']} in {r['consumeSeconds']}s "
        f"(missing {r['missing']})",
        f"looked up {lookup['messageId']} by id: body {lookup['body']!r}, keys {lookup['keys']}",
        *(f"metric {line}" for line in r["metrics"]),
        f"verdict: {r['verdict']}",
    ]


def store_lines(r: dict[str, Any]) -> list[str]:
    recovery = r["recovery"]
    return [
        f"{r['what']} ({r['directory']})",
        f"acknowledged {r['acknowledged']} records "
        f"({r['acknowledged_per_s_before_kill']:,}/s before the kill)",
        f"recovery took {recovery['seconds']}s; log end {recovery['log_end']}; "
        f"stopped because: {recovery['stopped_because']}",
        f"stored {r['stored']}, consumed through queues {r['consumed_through_queues']}, "
        f"lost {r['lost']}",
        f"verdict: {r['verdict']}",
    ]
