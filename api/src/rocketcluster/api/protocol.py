"""The RocketMQ 5 protocol's generated modules, imported without the official client.

Why. The generated protobuf and gRPC modules ship inside the official client's
package (``rocketmq.grpc_protocol``), and importing any module of a package first
runs the package's ``__init__``: ``rocketmq/__init__.py`` imports the whole client,
and the client its OpenTelemetry exporter. A broker serves the protocol and the lean
client speaks it, neither uses the official client, yet every store process and every
front paid for it at each start:
0.2 s of CPU (half of what importing the protocol cost) and about 9 MB of memory per
process — more on a loaded node, where a restarted broker's imports are the time
between its start and its first answer.

How. Before the first import of ``rocketmq``, the package is registered bare: a module
with the package's path (so its submodules import as usual) whose ``__init__`` has not
run. It runs the first time something asks the package for a name only it defines
(``from rocketmq import Producer``), in the same module object, so a process that
also uses the client (a test, a tool) gets the whole package as before. A process
that imported the client first keeps it untouched.

Our modules import the protocol from here, never from ``rocketmq.grpc_protocol``.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types
from importlib.machinery import ModuleSpec
from typing import Any

PACKAGE = "rocketmq"


class _BarePackage(types.ModuleType):
    """A package whose ``__init__`` runs on the first lookup of a name it lacks."""

    def __init__(self, spec: ModuleSpec) -> None:
        super().__init__(spec.name)
        self.__spec__ = spec
        self.__path__ = list(spec.submodule_search_locations or [])
        self.__file__ = spec.origin
        self.__package__ = spec.name
        self.__loader__ = spec.loader
        self._init_lock = threading.RLock()
        self._init_ran = False

    def __getattr__(self, name: str) -> Any:
        # only called for names the module does not have yet
        if (name.startswith("__") and name != "__all__") or self._init_ran:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        with self._init_lock:
            if not self._init_ran:
                self._init_ran = True  # before: the __init__ looks names up itself
                spec = self.__spec__
                assert spec is not None and spec.loader is not None
                try:
                    spec.loader.exec_module(self)
                except BaseException:
                    self._init_ran = False  # the next lookup raises the same error
                    raise
        return getattr(self, name)


def _register_bare_package() -> None:
    if PACKAGE in sys.modules:
        return
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        raise ImportError(
            f"the {PACKAGE!r} package (rocketmq-python-client) is not installed: run `make setup`"
        )
    sys.modules[PACKAGE] = _BarePackage(spec)


_register_bare_package()

from rocketmq.grpc_protocol import definition_pb2 as pb  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as spb  # noqa: E402
from rocketmq.grpc_protocol import service_pb2_grpc  # noqa: E402

MessagingServiceStub = service_pb2_grpc.MessagingServiceStub

__all__ = ["MessagingServiceStub", "pb", "service_pb2_grpc", "spb"]
