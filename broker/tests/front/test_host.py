"""The store process's side of a front's channel, over a real socket pair: relayed
calls run by the servicers they name, SendMessage calls of one read stored together,
cancels and a lost front end what they must."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from rocketcluster.broker.front import frames as f
from rocketcluster.broker.front.channel import Channel
from rocketcluster.broker.front.host import FrontConnection

SEND = f.METHOD_INDEX[(f.MESSAGING_SERVICE.full_name, "SendMessage")]
ROUTE = f.METHOD_INDEX[(f.MESSAGING_SERVICE.full_name, "QueryRoute")]
ACK = f.METHOD_INDEX[(f.MESSAGING_SERVICE.full_name, "AckMessage")]
RECEIVE = f.METHOD_INDEX[(f.MESSAGING_SERVICE.full_name, "ReceiveMessage")]
METADATA = (("x-mq-client-id", "c1"),)


class Servicer:
    """Answers from what it was asked; QueryRoute waits until told, ReceiveMessage
    streams three answers."""

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.acks: list[int] = []
        self.release = asyncio.Event()
        self.cancelled = 0

    async def SendMessages(self, calls: list[tuple[Any, Any]]) -> list[Any]:
        self.batches.append(len(calls))
        return [
            spb.SendMessageResponse(
                status=pb.Status(code=20000, message=r.messages[0].topic.name),
            )
            for r, _ in calls
        ]

    async def AckMessages(self, calls: list[tuple[Any, Any]]) -> list[Any]:
        self.acks.append(len(calls))
        return [
            spb.AckMessageResponse(status=pb.Status(code=20000, message=r.group.name))
            for r, _ in calls
        ]

    async def QueryRoute(self, request: Any, context: Any) -> Any:
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        client = dict(context.invocation_metadata())["x-mq-client-id"]
        assert context.time_remaining() <= 5.0
        return spb.QueryRouteResponse(status=pb.Status(code=20000, message=client))

    async def ReceiveMessage(self, request: Any, context: Any) -> Any:
        for n in range(3):
            yield spb.ReceiveMessageResponse(status=pb.Status(code=20000, message=str(n)))

    def __getattr__(self, name: str) -> Any:
        return None  # methods these tests do not call


class Front:
    """The front's end: sends frames, collects what comes back."""

    def __init__(self) -> None:
        self.got: list[tuple[Any, ...]] = []
        self.arrived = asyncio.Event()
        self.channel: Channel | None = None

    def on_frames(self, frames: list[tuple[Any, ...]]) -> None:
        self.got += frames
        self.arrived.set()

    async def wait_for(self, count: int) -> None:
        while len(self.got) < count:
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), 5)


async def _pair() -> tuple[Servicer, FrontConnection, Front, list[str]]:
    servicer = Servicer()
    lost: list[str] = []
    services = {f.MESSAGING_SERVICE.full_name: servicer, f.CONSUME_SERVICE.full_name: servicer}
    host = FrontConnection(services, lambda _c: None, lambda _c, why: lost.append(why), None)
    a, b = socket.socketpair()
    host.attach(await Channel.open(a, host.on_frames, host.lose))
    front = Front()
    front.channel = await Channel.open(b, front.on_frames, lambda _why: None)
    return servicer, host, front, lost


async def _until(condition: Any) -> None:
    for _ in range(100):
        if condition():
            return
        await asyncio.sleep(0.02)


def _send(call: int, topic: str) -> tuple[Any, ...]:
    request = spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name=topic))])
    return (f.CALL, call, SEND, 5.0, "ipv4:1.2.3.4:5", METADATA, request.SerializeToString())


def test_sends_of_one_read_are_one_batch_each_answered() -> None:
    async def run() -> None:
        servicer, _host, front, _ = await _pair()
        assert front.channel is not None
        for call in range(1, 6):
            front.channel.send(_send(call, f"t{call}"))
        await front.wait_for(5)
        assert servicer.batches == [5]  # one loop turn's frames: one write, one read
        answers = {frame[1]: spb.SendMessageResponse.FromString(frame[2]) for frame in front.got}
        assert {c: a.status.message for c, a in answers.items()} == {
            c: f"t{c}" for c in range(1, 6)
        }
        assert all(frame[0] == f.REPLY for frame in front.got)

    asyncio.run(run())


def test_acks_of_one_read_are_one_batch_beside_the_sends() -> None:
    async def run() -> None:
        servicer, host, front, _ = await _pair()
        assert front.channel is not None
        for call in range(1, 4):
            ack = spb.AckMessageRequest(group=pb.Resource(name=f"g{call}"))
            front.channel.send((f.CALL, call, ACK, 5.0, "p", METADATA, ack.SerializeToString()))
        front.channel.send(_send(9, "t9"))
        await front.wait_for(4)
        assert servicer.acks == [3] and servicer.batches == [1]
        answers = {frame[1]: frame[2] for frame in front.got}
        assert spb.AckMessageResponse.FromString(answers[2]).status.message == "g2"
        assert host.stats.batched == {"AckMessage": 3, "SendMessage": 1}
        assert host.stats.batches == {"AckMessage": 1, "SendMessage": 1}

    asyncio.run(run())


def test_a_cancel_ends_the_call_and_streams_end_with_end() -> None:
    async def run() -> None:
        servicer, host, front, _ = await _pair()
        assert front.channel is not None
        route = spb.QueryRouteRequest().SerializeToString()
        front.channel.send((f.CALL, 7, ROUTE, 5.0, "p", METADATA, route))
        front.channel.send((f.CALL, 8, ROUTE, 5.0, "p", METADATA, route))
        await asyncio.sleep(0.05)
        assert host.in_progress == 2
        front.channel.send((f.CANCEL, 7))
        await asyncio.sleep(0.05)
        assert servicer.cancelled == 1 and host.in_progress == 1
        servicer.release.set()
        receive = spb.ReceiveMessageRequest().SerializeToString()
        front.channel.send((f.CALL, 9, RECEIVE, -1.0, "p", METADATA, receive))
        await front.wait_for(5)
        kinds = [(frame[0], frame[1]) for frame in front.got]
        assert (f.REPLY, 8) in kinds and all(c != 7 for _, c in kinds)
        assert [k for k, c in kinds if c == 9] == [f.MESSAGE, f.MESSAGE, f.MESSAGE, f.END]

    asyncio.run(run())


def test_a_lost_front_cancels_what_it_asked_for() -> None:
    async def run() -> None:
        servicer, host, front, lost = await _pair()
        assert front.channel is not None
        route = spb.QueryRouteRequest().SerializeToString()
        front.channel.send((f.CALL, 1, ROUTE, 5.0, "p", METADATA, route))
        await asyncio.sleep(0.05)
        front.channel.close()
        await _until(lambda: lost)
        assert lost and host.in_progress == 0
        await asyncio.sleep(0)
        assert servicer.cancelled == 1

    asyncio.run(run())


def test_request_bytes_that_do_not_decode_are_answered_bad_request() -> None:
    """A front that reads no field (no auth) passes the client's bytes on: the store
    process answers them as a single process's admission does."""

    async def run() -> None:
        _servicer, _host, front, _ = await _pair()
        assert front.channel is not None
        front.channel.send((f.CALL, 3, ROUTE, 5.0, "p", METADATA, b"\xff\xff\xff"))
        front.channel.send((f.CALL, 4, RECEIVE, 5.0, "p", METADATA, b"\xff\xff\xff"))
        await front.wait_for(3)
        by_call = {(frame[0], frame[1]): frame[2] for frame in front.got}
        answer = spb.QueryRouteResponse.FromString(by_call[(f.REPLY, 3)])
        assert answer.status.code == 40000 and "could not be decoded" in answer.status.message
        streamed = spb.ReceiveMessageResponse.FromString(by_call[(f.MESSAGE, 4)])
        assert streamed.status.code == 40000 and by_call[(f.END, 4)] is None

    asyncio.run(run())


def test_a_front_of_another_installation_is_refused() -> None:
    async def run() -> None:
        _servicer, _host, front, lost = await _pair()
        assert front.channel is not None
        front.channel.send((f.HELLO, 0, 123, "0" * 16))
        await _until(lambda: lost)
        assert lost and "another method table" in lost[0]

    asyncio.run(run())
