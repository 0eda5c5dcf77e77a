"""The protocol modules import without the official client, and a process that also
uses the client still gets all of it (rocketcluster.api.protocol). Each case runs in a
fresh interpreter: what a process has imported is the point."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CLIENT_MODULES = ("rocketmq.v5.client", "rocketmq.v5.producer", "opentelemetry")


def run_python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


@pytest.mark.parametrize(
    "module",
    [
        "rocketcluster.api.protocol",
        "rocketcluster.broker.front.process",  # what a front imports before it serves
        "rocketcluster.broker.messaging.service",  # what the store process serves with
        "rocketcluster.api.client.lean",
    ],
)
def test_serving_the_protocol_imports_none_of_the_official_client(module: str) -> None:
    loaded = run_python(
        f"""
        import sys
        import {module}
        print(",".join(m for m in {CLIENT_MODULES!r} if m in sys.modules))
        """
    )
    assert loaded == "", f"importing {module} loaded {loaded}"


def test_the_protocol_is_the_official_packages_own() -> None:
    same = run_python(
        """
        from rocketcluster.api.protocol import pb, spb
        import rocketmq.grpc_protocol.definition_pb2 as definition
        request = spb.SendMessageRequest()
        request.messages.add().topic.name = "t"
        print(pb is definition, spb.SendMessageRequest.DESCRIPTOR.full_name,
              len(request.SerializeToString()))
        """
    )
    assert same.split() == ["True", "apache.rocketmq.v2.SendMessageRequest", "7"]


def test_a_process_that_also_uses_the_client_gets_the_whole_package() -> None:
    names = run_python(
        """
        import rocketcluster.api.protocol
        import rocketmq
        from rocketmq import ClientConfiguration, Producer, SimpleConsumer
        from rocketmq.v5.producer import Producer as Direct
        namespace = {}
        exec("from rocketmq import *", namespace)
        print(Producer is Direct, "SimpleConsumer" in namespace, hasattr(rocketmq, "nothing"))
        """
    )
    assert names.split() == ["True", "True", "False"]


def test_a_client_imported_first_is_left_as_it_is() -> None:
    kind = run_python(
        """
        import rocketmq
        import rocketcluster.api.protocol
        import sys
        print(type(sys.modules["rocketmq"]).__name__, rocketmq.Producer.__name__)
        """
    )
    assert kind.split() == ["module", "Producer"]
