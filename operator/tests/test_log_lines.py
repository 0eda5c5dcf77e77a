"""The operator's log lines name the object kopf speaks of (``[Kind namespace/name]``):
with thousands of RocketTopic objects, "Handler 'put_entry' succeeded." alone says
nothing."""

from __future__ import annotations

import logging

from rocketcluster.operator.main import _NamesTheObject

FORMAT = "%(levelname)s %(name)s: %(message)s"


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord(
        "kopf.objects", logging.INFO, __file__, 1, "Handler %r done.", ("put_entry",), None
    )
    record.__dict__.update(extra)
    return record


def test_a_line_about_an_object_names_it() -> None:
    ref = {"kind": "RocketTopic", "namespace": "prod", "name": "invoices"}
    line = _NamesTheObject(FORMAT).format(_record(k8s_ref=ref))
    assert line == "INFO kopf.objects: [RocketTopic prod/invoices] Handler 'put_entry' done."


def test_a_cluster_scoped_object_and_other_lines() -> None:
    ref = {"kind": "Namespace", "namespace": None, "name": "prod"}
    assert "[Namespace prod] Handler" in _NamesTheObject(FORMAT).format(_record(k8s_ref=ref))
    plain = _NamesTheObject(FORMAT).format(_record())
    assert plain == "INFO kopf.objects: Handler 'put_entry' done."
