"""The tier's two backends against one contract, on real storage: a directory and a
real S3 endpoint (moto served over HTTP), plus what only one of them has (multipart
uploads, outages of the endpoint, temporary files, failed writes on disk)."""

from __future__ import annotations

import errno
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from rocketcluster.broker.tiered import posix as posix_module
from rocketcluster.broker.tiered.backend import (
    BackendError,
    ObjectExists,
    ObjectInfo,
    ObjectNotFound,
    TierBackend,
)
from rocketcluster.broker.tiered.posix import PosixBackend
from rocketcluster.broker.tiered.s3 import MIN_PART_SIZE, S3Backend
from rocketcluster.e2e.s3server import S3Server, running_s3_server

from .conftest import MakeS3, new_bucket, s3_backend_for

KINDS = ["posix", "s3", "s3-prefixed"]


@pytest.fixture(params=KINDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> TierBackend:
    if request.param == "posix":
        return PosixBackend(tmp_path)
    make_s3: MakeS3 = request.getfixturevalue("make_s3")
    return make_s3(prefix="cluster-a/tier" if request.param == "s3-prefixed" else "")


def payload(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


def race(workers: int, attempt: Callable[[int], None]) -> tuple[list[int], list[int]]:
    """Run ``attempt(i)`` for ``workers`` threads released together; return the
    indices that succeeded and those refused with ObjectExists (anything else fails
    the test)."""
    start = threading.Barrier(workers)

    def one(i: int) -> bool:
        start.wait()
        try:
            attempt(i)
        except ObjectExists:
            return False
        return True

    with ThreadPoolExecutor(workers) as pool:
        outcomes = list(pool.map(one, range(workers)))
    won = [i for i, ok in enumerate(outcomes) if ok]
    lost = [i for i, ok in enumerate(outcomes) if not ok]
    return won, lost


# -- the contract, for every backend ---------------------------------------------------


def test_put_then_get_whole_and_ranges(backend: TierBackend) -> None:
    data = payload(1000)
    backend.put_new("topic/0/00000000000000000000.seg", data)

    name = "topic/0/00000000000000000000.seg"
    assert backend.get(name) == data
    assert backend.get(name, 10, 20) == data[10:20]
    assert backend.get(name, 990) == data[990:]
    assert backend.get(name, 0, 1) == data[:1]
    assert backend.get(name, 995, 2000) == data[995:], "a range past the end is cut short"
    assert backend.get(name, 1000) == b""
    assert backend.get(name, 1500, 1600) == b""
    assert backend.get(name, 5, 5) == b""


def test_put_new_is_create_only(backend: TierBackend) -> None:
    backend.put_new("q/segment", b"first writer")

    with pytest.raises(ObjectExists):
        backend.put_new("q/segment", b"second writer, longer than the first")

    assert backend.get("q/segment") == b"first writer"
    assert backend.list("q/") == [ObjectInfo("q/segment", len(b"first writer"))]


def test_concurrent_put_new_has_exactly_one_winner(backend: TierBackend) -> None:
    for round_ in range(3):
        name = f"race/{round_}"
        bodies = [payload(4096 + i, seed=i) for i in range(8)]

        def attempt(i: int, name: str = name, bodies: list[bytes] = bodies) -> None:
            backend.put_new(name, bodies[i])

        won, lost = race(8, attempt)

        assert len(won) == 1, f"round {round_}: winners {won}"
        assert len(lost) == 7
        assert backend.get(name) == bodies[won[0]]


def test_get_of_a_missing_name(backend: TierBackend) -> None:
    backend.put_new("present/x", b"x")

    with pytest.raises(ObjectNotFound):
        backend.get("present/y")
    with pytest.raises(ObjectNotFound):
        backend.get("absent/y", 3, 9)
    with pytest.raises(ObjectNotFound):
        backend.get("present", 0, 0)  # only a prefix of an object


def test_list_is_sorted_and_filtered_by_prefix(backend: TierBackend) -> None:
    sizes = {"a/b/2": 2, "a/b/10": 10, "a/b/c/d": 4, "a/bc/1": 1, "b/1": 3, "top": 5}
    for name, size in sizes.items():
        backend.put_new(name, payload(size))

    def listed(prefix: str) -> list[tuple[str, int]]:
        return [(info.name, info.size) for info in backend.list(prefix)]

    assert listed("a/b/") == [("a/b/10", 10), ("a/b/2", 2), ("a/b/c/d", 4)]
    assert listed("a/b") == [("a/b/10", 10), ("a/b/2", 2), ("a/b/c/d", 4), ("a/bc/1", 1)]
    assert listed("a/b/1") == [("a/b/10", 10)]
    assert listed("") == sorted(sizes.items())
    assert listed("t") == [("top", 5)]
    assert listed("zzz/") == []
    assert listed("a/b/c/d/") == []


def test_delete_is_idempotent_and_frees_the_name(backend: TierBackend) -> None:
    for name in ("d/1", "d/2", "d/sub/3", "keep/1"):
        backend.put_new(name, name.encode())

    backend.delete(["d/1", "d/sub/3", "d/never-was"])
    backend.delete(["d/1", "d/sub/3"])
    backend.delete([])

    assert [info.name for info in backend.list("")] == ["d/2", "keep/1"]
    with pytest.raises(ObjectNotFound):
        backend.get("d/1")
    backend.put_new("d/sub/3", b"again")
    assert backend.get("d/sub/3") == b"again"


def test_an_empty_object(backend: TierBackend) -> None:
    backend.put_new("empty/0", b"")

    assert backend.get("empty/0") == b""
    assert backend.get("empty/0", 0, 0) == b""
    assert backend.get("empty/0", 0, 10) == b""
    assert backend.list("empty/") == [ObjectInfo("empty/0", 0)]
    with pytest.raises(ObjectExists):
        backend.put_new("empty/0", b"")


def test_memoryview_data(backend: TierBackend) -> None:
    buffer = bytearray(payload(300))
    backend.put_new("view/1", memoryview(buffer)[100:200])

    assert backend.get("view/1") == bytes(buffer[100:200])


@pytest.mark.parametrize(
    "name", ["", "/abs", "a/../../b", "..", "a//b", "a/./b", "a/", ".tmp-1-x", "a/.tmp-2"]
)
def test_names_that_could_escape_or_collide_are_refused(backend: TierBackend, name: str) -> None:
    with pytest.raises(ValueError):
        backend.put_new(name, b"x")
    with pytest.raises(ValueError):
        backend.get(name)
    with pytest.raises(ValueError):
        backend.delete([name])


def test_a_bad_range_is_refused(backend: TierBackend) -> None:
    backend.put_new("r", b"0123456789")

    with pytest.raises(ValueError):
        backend.get("r", -1)
    with pytest.raises(ValueError):
        backend.get("r", 5, 4)


# -- S3 ---------------------------------------------------------------------------------

BIG = 2 * MIN_PART_SIZE + 12_345  # three parts of 5 MiB (the last one short)


def test_s3_large_object_goes_up_in_parts(make_s3: MakeS3, s3_server: S3Server) -> None:
    backend = make_s3(prefix="big", multipart_threshold=MIN_PART_SIZE, part_size=MIN_PART_SIZE)
    data = payload(BIG, seed=7)

    backend.put_new("seg/0", data)

    raw = s3_server.client()
    head = raw.head_object(Bucket=backend.bucket, Key="big/seg/0")
    assert head["ETag"].strip('"').endswith("-3"), f"not a 3-part upload: {head['ETag']}"
    assert head["ContentLength"] == BIG
    assert backend.get("seg/0") == data
    boundary = MIN_PART_SIZE
    assert backend.get("seg/0", boundary - 10, boundary + 10) == data[boundary - 10 : boundary + 10]
    assert backend.get("seg/0", BIG - 5) == data[-5:]


def test_s3_multipart_and_single_writes_refuse_each_other(
    make_s3: MakeS3, s3_server: S3Server
) -> None:
    backend = make_s3(multipart_threshold=MIN_PART_SIZE, part_size=MIN_PART_SIZE)
    big, small = payload(BIG, seed=1), b"small"
    backend.put_new("by-parts", big)
    backend.put_new("by-one-put", small)

    with pytest.raises(ObjectExists):
        backend.put_new("by-parts", payload(BIG, seed=2))  # multipart onto multipart
    with pytest.raises(ObjectExists):
        backend.put_new("by-parts", small)  # one put onto multipart
    with pytest.raises(ObjectExists):
        backend.put_new("by-one-put", big)  # multipart onto one put

    assert backend.get("by-parts") == big
    assert backend.get("by-one-put") == small
    uploads = s3_server.client().list_multipart_uploads(Bucket=backend.bucket)
    assert uploads.get("Uploads", []) == [], "a refused multipart upload was not aborted"


def test_s3_concurrent_multipart_writers_have_one_winner(
    make_s3: MakeS3, s3_server: S3Server
) -> None:
    backend = make_s3(multipart_threshold=MIN_PART_SIZE, part_size=MIN_PART_SIZE)
    bodies = [payload(MIN_PART_SIZE + 100 * i + 1, seed=i) for i in range(3)]

    won, lost = race(3, lambda i: backend.put_new("contested", bodies[i]))

    assert len(won) == 1 and len(lost) == 2
    assert backend.get("contested") == bodies[won[0]]
    uploads = s3_server.client().list_multipart_uploads(Bucket=backend.bucket)
    assert uploads.get("Uploads", []) == []


def test_s3_failed_part_upload_is_aborted(make_s3: MakeS3, s3_server: S3Server) -> None:
    backend = make_s3(multipart_threshold=MIN_PART_SIZE, part_size=MIN_PART_SIZE, max_attempts=1)
    parts_sent = 0

    def fail_second_part(**_: Any) -> None:
        nonlocal parts_sent
        parts_sent += 1
        if parts_sent == 2:
            raise EndpointConnectionError(endpoint_url=s3_server.endpoint)

    client = backend._client()  # the test reaches in to inject a network fault
    client.meta.events.register("before-send.s3.UploadPart", fail_second_part)

    with pytest.raises(BackendError) as caught:
        backend.put_new("torn", payload(BIG))

    assert not isinstance(caught.value, ObjectExists)
    assert backend.list("") == []
    uploads = s3_server.client().list_multipart_uploads(Bucket=backend.bucket)
    assert uploads.get("Uploads", []) == [], "the failed multipart upload was not aborted"
    client.meta.events.unregister("before-send.s3.UploadPart", fail_second_part)
    backend.put_new("torn", b"now whole")
    assert backend.get("torn") == b"now whole"


def test_s3_prefixes_keep_tiers_apart(s3_server: S3Server, s3_bucket: str) -> None:
    one = s3_backend_for(s3_server, s3_bucket, prefix="tier")
    other = s3_backend_for(s3_server, s3_bucket, prefix="/tier-b/")
    one.put_new("x", b"one")
    other.put_new("x", b"other")

    assert one.list("") == [ObjectInfo("x", 3)]
    assert other.list("") == [ObjectInfo("x", 5)]
    assert one.describe().startswith(f"s3://{s3_bucket}/tier/")
    keys = [o["Key"] for o in s3_server.client().list_objects_v2(Bucket=s3_bucket)["Contents"]]
    assert sorted(keys) == ["tier-b/x", "tier/x"]


def test_s3_missing_bucket_is_an_error_not_a_missing_object(s3_server: S3Server) -> None:
    backend = s3_backend_for(s3_server, "no-such-bucket-here")

    with pytest.raises(BackendError) as caught:
        backend.get("x")
    assert not isinstance(caught.value, ObjectNotFound)
    assert "NoSuchBucket" in str(caught.value)
    assert "no-such-bucket-here" in str(caught.value)


def test_s3_list_follows_pages_and_delete_goes_in_batches(make_s3: MakeS3) -> None:
    backend = make_s3(prefix="many")
    names = [f"n/{i:03d}" for i in range(25)]
    for name in names:
        backend.put_new(name, b".")
    client = backend._client()  # the test reaches in to shrink pages and count calls
    calls = {"ListObjectsV2": 0, "DeleteObjects": 0}

    def small_pages(params: dict[str, Any], **_: Any) -> None:
        params["MaxKeys"] = 10

    def count(event_name: str, **_: Any) -> None:
        calls[event_name.rsplit(".", 1)[-1]] += 1

    client.meta.events.register("provide-client-params.s3.ListObjectsV2", small_pages)
    client.meta.events.register("before-call.s3.ListObjectsV2", count)
    client.meta.events.register("before-call.s3.DeleteObjects", count)

    assert [info.name for info in backend.list("n/")] == names
    assert calls["ListObjectsV2"] == 3

    backend.delete(names[:20] + [f"gone/{i}" for i in range(1500)])
    assert calls["DeleteObjects"] == 2, "1520 keys go in batches of at most 1000"
    assert [info.name for info in backend.list("")] == names[20:]


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port with nothing listening (bound, never listened: connects are
    refused, and nobody else can take the port meanwhile)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_s3_unreachable_endpoint_fails_fast(closed_port: int) -> None:
    endpoint = f"http://127.0.0.1:{closed_port}"
    backend = S3Backend(
        "tier-bucket",
        endpoint=endpoint,
        access_key="k",
        secret_key="s",
        region="us-east-1",
        connect_timeout=1.0,
        read_timeout=1.0,
        max_attempts=1,
    )
    calls: list[Callable[[], object]] = [
        lambda: backend.put_new("a", b"x"),
        lambda: backend.put_new("b", b"x" * (9 * 1024 * 1024)),
        lambda: backend.get("a"),
        lambda: backend.list(""),
        lambda: backend.delete(["a"]),
    ]
    began = time.monotonic()
    for call in calls:
        with pytest.raises(BackendError) as caught:
            call()
        assert type(caught.value) is BackendError
        assert endpoint in str(caught.value) and "tier-bucket" in str(caught.value)
    assert time.monotonic() - began < 10


def test_s3_outage_and_recovery() -> None:
    with running_s3_server() as server:
        bucket = new_bucket(server)
        backend = s3_backend_for(server, bucket, max_attempts=1, connect_timeout=1.0)
        backend.put_new("before", b"kept")
        assert backend.get("before") == b"kept"  # a pooled connection is now open

        server.pause()
        for call in (
            lambda: backend.get("before"),
            lambda: backend.put_new("during", b"lost"),
            lambda: backend.list(""),
        ):
            with pytest.raises(BackendError) as caught:
                call()
            assert type(caught.value) is BackendError
        direct = server.client(direct=True)
        assert direct.list_objects_v2(Bucket=bucket)["KeyCount"] == 1  # moto is fine

        server.resume()
        assert backend.get("before") == b"kept"
        backend.put_new("during", b"written after the outage")
        assert [info.name for info in backend.list("")] == ["before", "during"]


def test_s3_outage_in_the_middle_of_a_multipart_upload() -> None:
    with running_s3_server() as server:
        bucket = new_bucket(server)
        backend = s3_backend_for(
            server,
            bucket,
            max_attempts=1,
            connect_timeout=1.0,
            multipart_threshold=MIN_PART_SIZE,
            part_size=MIN_PART_SIZE,
        )
        parts_sent = 0

        def outage_at_second_part(**_: Any) -> None:
            nonlocal parts_sent
            parts_sent += 1
            if parts_sent == 2:
                server.pause()

        client = backend._client()  # the test reaches in to time the outage
        client.meta.events.register("before-send.s3.UploadPart", outage_at_second_part)
        data = payload(BIG)

        with pytest.raises(BackendError) as caught:
            backend.put_new("seg", data)
        assert type(caught.value) is BackendError

        server.resume()
        assert backend.list("") == [], "parts of an unfinished upload became visible"
        backend.put_new("seg", data)
        assert backend.get("seg") == data


def test_s3_hanging_endpoint_times_out() -> None:
    with running_s3_server() as server:
        bucket = new_bucket(server)
        backend = s3_backend_for(server, bucket, max_attempts=1, read_timeout=0.5)
        backend.put_new("x", b"x")

        server.pause(hang=True)
        began = time.monotonic()
        with pytest.raises(BackendError, match=r"(?i)timeout"):
            backend.get("x")
        assert time.monotonic() - began < 5

        server.resume()
        assert backend.get("x") == b"x"


def test_s3_part_size_below_the_minimum_is_refused() -> None:
    with pytest.raises(ValueError, match="part_size"):
        S3Backend("b", part_size=MIN_PART_SIZE - 1)


def test_s3_backend_is_lazy() -> None:
    backend = S3Backend("b", endpoint="http://127.0.0.1:9", region="us-east-1")

    assert backend.describe() == "s3://b/ at http://127.0.0.1:9"
    assert backend._client_instance is None


# -- POSIX ------------------------------------------------------------------------------


def files_under(root: Path) -> list[str]:
    return sorted(
        str(Path(directory, name).relative_to(root))
        for directory, _, names in os.walk(root)
        for name in names
    )


def test_posix_temporary_files_are_never_listed(tmp_path: Path) -> None:
    backend = PosixBackend(tmp_path)
    backend.put_new("a/1", b"1")
    (tmp_path / ".tmp-99-dead").write_bytes(b"crashed writer")
    (tmp_path / "a" / ".tmp-98-dead").write_bytes(b"crashed writer")

    assert backend.list("") == [ObjectInfo("a/1", 1)]
    assert backend.list("a/") == [ObjectInfo("a/1", 1)]
    assert backend.list(".tmp") == []


def test_posix_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    backend = PosixBackend(tmp_path)
    backend.put_new("x/y/z", b"data")
    with pytest.raises(ObjectExists):
        backend.put_new("x/y/z", b"other")

    assert files_under(tmp_path) == ["x/y/z"]
    assert (tmp_path / "x/y/z").stat().st_nlink == 1


class Failure:
    """A fault injected into one step of a write."""

    def __init__(self, step: str, code: int) -> None:
        self.step, self.code = step, code

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        error = OSError(self.code, os.strerror(self.code))
        if self.step == "write":
            real_write_all = posix_module._write_all

            def half_then_fail(fd: int, view: memoryview) -> None:
                real_write_all(fd, view[: len(view) // 2])
                raise error

            monkeypatch.setattr(posix_module, "_write_all", half_then_fail)
        else:
            real = getattr(os, self.step)
            calls = 0

            def fail_first(*args: Any, **kwargs: Any) -> Any:
                nonlocal calls
                calls += 1
                if calls == 1:
                    raise error
                return real(*args, **kwargs)

            monkeypatch.setattr(os, self.step, fail_first)


@pytest.mark.parametrize(
    ("failure", "shown"),
    [
        (Failure("write", errno.ENOSPC), "volume full"),
        (Failure("fsync", errno.EIO), "EIO"),
        (Failure("link", errno.EACCES), "no write permission"),
    ],
    ids=["disk-full-mid-write", "fsync-fails", "link-refused"],
)
def test_posix_failed_write_leaves_nothing_visible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: Failure, shown: str
) -> None:
    backend = PosixBackend(tmp_path)
    data = payload(100_000)
    with monkeypatch.context() as patched:
        failure.install(patched)
        with pytest.raises(BackendError, match=shown) as caught:
            backend.put_new("seg/1", data)

    assert type(caught.value) is BackendError
    assert backend.list("") == []
    assert files_under(tmp_path) == [], "a partial or temporary file was left behind"
    with pytest.raises(ObjectNotFound):
        backend.get("seg/1")
    backend.put_new("seg/1", data)
    assert backend.get("seg/1") == data


def test_posix_lost_link_reply_is_a_success(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NFS: a retransmitted LINK whose first reply was lost answers EEXIST although
    the link was made; the temporary file's link count tells it was ours."""
    real_link = os.link

    def link_then_claim_exists(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        real_link(src, dst, *args, **kwargs)
        raise FileExistsError(errno.EEXIST, "File exists")

    backend = PosixBackend(tmp_path)
    with monkeypatch.context() as patched:
        patched.setattr(os, "link", link_then_claim_exists)
        backend.put_new("n/1", b"mine")

    assert backend.get("n/1") == b"mine"
    assert files_under(tmp_path) == ["n/1"]


def test_posix_missing_root_is_an_outage(tmp_path: Path) -> None:
    root = tmp_path / "not-mounted"
    backend = PosixBackend(root)

    for call in (
        lambda: backend.put_new("a/b", b"x"),
        lambda: backend.get("a/b"),
        lambda: backend.list(""),
        lambda: backend.delete(["a/b"]),
    ):
        with pytest.raises(BackendError, match="not mounted") as caught:
            call()
        assert type(caught.value) is BackendError
    assert not root.exists(), "the backend must never create its root"


def test_posix_delete_prunes_empty_directories(tmp_path: Path) -> None:
    backend = PosixBackend(tmp_path)
    backend.put_new("t/0/seg", b"x")
    backend.put_new("t/1/seg", b"y")

    backend.delete(["t/0/seg"])

    assert not (tmp_path / "t" / "0").exists()
    assert (tmp_path / "t" / "1" / "seg").exists()
    backend.delete(["t/1/seg"])
    assert list(tmp_path.iterdir()) == []
    assert tmp_path.is_dir()


def test_posix_object_and_directory_cannot_share_a_name(tmp_path: Path) -> None:
    """S3 allows objects ``a`` and ``a/b`` side by side; a directory tree cannot, and
    saying "exists" would be a lie, so it is an error of its own."""
    backend = PosixBackend(tmp_path)
    backend.put_new("a", b"file")
    backend.put_new("d/e", b"file")

    with pytest.raises(BackendError, match="is an object") as under_file:
        backend.put_new("a/b", b"x")
    with pytest.raises(BackendError, match="is a directory") as over_dir:
        backend.put_new("d", b"x")

    assert not isinstance(under_file.value, ObjectExists)
    assert not isinstance(over_dir.value, ObjectExists)
    assert [info.name for info in backend.list("")] == ["a", "d/e"]


def test_posix_describe(tmp_path: Path) -> None:
    assert PosixBackend(tmp_path).describe() == f"posix:{tmp_path}"
