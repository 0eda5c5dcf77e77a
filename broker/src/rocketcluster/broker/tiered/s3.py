"""The tier in an S3 bucket (AWS S3 or an S3-compatible store), through boto3.

Create-only writes use S3 conditional writes: ``If-None-Match: *`` makes S3 refuse a
write whose key exists (``412 Precondition Failed``), decided atomically on the
server, so two brokers that both believe they lead cannot both write one object.

- Objects up to ``multipart_threshold`` go up in one ``PutObject`` carrying the
  condition.
- Larger ones go up as a multipart upload whose ``CompleteMultipartUpload`` carries the
  condition: the parts are invisible until completion, and completion is the one
  atomic, conditional step (AWS has honoured ``If-None-Match`` there since
  August 2024, and moto 5 does too; the broker tests check both refusals). The upload
  is aborted on any failure, so a lost race or an outage leaves no billed parts
  behind, except when the abort itself cannot reach S3: a bucket lifecycle rule
  ``AbortIncompleteMultipartUpload`` is the backstop for that.
- ``409 ConditionalRequestConflict`` means a conflicting write (a delete, another
  conditional write) was in flight; it does not prove that the name is taken, so the
  whole write is tried again a few times (for a multipart upload, with a new upload as
  AWS requires) and then reported as :class:`BackendError`, not
  :class:`ObjectExists`.

The parts of a multipart upload carry CRC32 checksums (declared at
``CreateMultipartUpload`` and listed at completion, as boto3's own transfer manager
does), so S3 verifies every part and the completed object.

Credentials come from the standard AWS chain (environment, shared files, IRSA / pod
identity, instance metadata); explicit keys exist for tests against a local emulator.
With a custom ``endpoint`` (moto, MinIO, Ceph) path-style addressing is used, which
every S3-compatible store understands.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from rocketcluster.broker.tiered.backend import (
    BackendError,
    ObjectExists,
    ObjectInfo,
    ObjectNotFound,
)
from rocketcluster.broker.tiered.posix import check_name

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef, ObjectIdentifierTypeDef

__all__ = ["MIN_PART_SIZE", "S3Backend"]

_log = logging.getLogger(__name__)

MiB: Final = 1024 * 1024
#: S3's smallest part (all but the last part of a multipart upload).
MIN_PART_SIZE: Final = 5 * MiB
#: S3's largest part count in one upload.
_MAX_PARTS: Final = 10_000
#: ``DeleteObjects`` takes at most this many keys.
_DELETE_BATCH: Final = 1000
#: Tries of a whole write that met ``409 ConditionalRequestConflict``.
_CONFLICT_TRIES: Final = 3


class _Conflict(Exception):
    """Internal: a 409 ConditionalRequestConflict; the write may be tried again."""


def _error_code(exc: ClientError) -> tuple[str, int]:
    error = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return str(error.get("Code", "")), int(status)


class S3Backend:
    """Objects as keys ``prefix + name`` in ``bucket``; see the module docstring.

    Blocking and thread-safe: one boto3 client (thread-safe) made on first use, so
    constructing a backend costs nothing and reaches nobody.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint: str | None = None,
        region: str | None = None,
        multipart_threshold: int = 8 * MiB,
        part_size: int = 8 * MiB,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        max_attempts: int = 3,
        max_connections: int = 16,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        if not bucket:
            raise ValueError("bucket is empty")
        if part_size < MIN_PART_SIZE:
            # S3 (and every compatible store we know) refuses smaller parts, but only
            # at CompleteMultipartUpload: say so now instead.
            raise ValueError(f"part_size {part_size} is below S3's minimum {MIN_PART_SIZE}")
        if multipart_threshold < 0 or max_attempts < 1 or max_connections < 1:
            raise ValueError("multipart_threshold, max_attempts and max_connections")
        if (access_key is None) != (secret_key is None):
            raise ValueError("give both access_key and secret_key, or neither")
        self._bucket = bucket
        stripped = prefix.strip("/")
        if stripped:
            check_name(stripped)
        self._prefix = f"{stripped}/" if stripped else ""
        self._endpoint = endpoint
        self._region = region
        self._threshold = multipart_threshold
        self._part_size = part_size
        self._config = Config(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"total_max_attempts": max_attempts, "mode": "standard"},
            max_pool_connections=max_connections,
            s3={"addressing_style": "path" if endpoint else "auto"},
        )
        self._access_key = access_key
        self._secret_key = secret_key
        self._client_lock = threading.Lock()
        self._client_instance: S3Client | None = None

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def prefix(self) -> str:
        """The key prefix, empty or ending in ``/``."""
        return self._prefix

    def describe(self) -> str:
        where = f"s3://{self._bucket}/{self._prefix}"
        return f"{where} at {self._endpoint}" if self._endpoint else where

    def _client(self) -> S3Client:
        """The boto3 client, made once (a session is not thread-safe; the client is)."""
        with self._client_lock:
            if self._client_instance is None:
                session = boto3.session.Session(
                    aws_access_key_id=self._access_key,
                    aws_secret_access_key=self._secret_key,
                    region_name=self._region,
                )
                try:
                    self._client_instance = session.client(
                        "s3", endpoint_url=self._endpoint, config=self._config
                    )
                except (BotoCoreError, ValueError) as exc:
                    raise BackendError(f"{self.describe()}: cannot make a client: {exc}") from exc
            return self._client_instance

    def close(self) -> None:
        """Release the client's pooled connections (not part of ``TierBackend``;
        a later call makes a new client)."""
        with self._client_lock:
            client, self._client_instance = self._client_instance, None
        if client is not None:
            client.close()

    def _key(self, name: str) -> str:
        check_name(name)
        return self._prefix + name

    def _failure(self, action: str, name: str, exc: Exception) -> BackendError:
        """A readable :class:`BackendError` naming the bucket, the endpoint and what
        S3 (or the network) said."""
        if isinstance(exc, ClientError):
            code, status = _error_code(exc)
            message = exc.response.get("Error", {}).get("Message", "")
            detail = f"{code or 'error'} (HTTP {status}): {message}".rstrip(": ")
        else:
            detail = f"{type(exc).__name__}: {exc}"
        return BackendError(f"{self.describe()}: cannot {action} {name!r}: {detail}")

    # -- writing -------------------------------------------------------------------

    def put_new(self, name: str, data: bytes | memoryview) -> None:
        key = self._key(name)
        view = memoryview(data).cast("B")
        client = self._client()
        for attempt in range(_CONFLICT_TRIES):
            try:
                if len(view) <= self._threshold:
                    self._put_single(client, key, data if isinstance(data, bytes) else bytes(view))
                else:
                    self._put_multipart(client, key, view)
                return
            except _Conflict as exc:
                if attempt == _CONFLICT_TRIES - 1:
                    raise BackendError(
                        f"{self.describe()}: cannot write {name!r}: a conflicting write "
                        f"kept interfering (409 ConditionalRequestConflict, "
                        f"{_CONFLICT_TRIES} tries); the name may or may not be taken"
                    ) from exc
                _log.info("%s: 409 conflict writing %r; trying again", self.describe(), name)
            except ObjectExists:
                raise
            except (ClientError, BotoCoreError) as exc:
                raise self._failure("write", name, exc) from exc

    def _check_conditional(self, exc: ClientError, key: str) -> None:
        """Turn the answers of a conditional write into ours; other errors go on."""
        code, status = _error_code(exc)
        if status == 412 or code == "PreconditionFailed":
            raise ObjectExists(f"{self.describe()}: {key!r} exists") from exc
        if status == 409 and code == "ConditionalRequestConflict":
            raise _Conflict(key) from exc

    def _put_single(self, client: S3Client, key: str, body: bytes) -> None:
        try:
            client.put_object(Bucket=self._bucket, Key=key, Body=body, IfNoneMatch="*")
        except ClientError as exc:
            self._check_conditional(exc, key)
            raise

    def _put_multipart(self, client: S3Client, key: str, view: memoryview) -> None:
        size = len(view)
        # Keep within S3's part count for huge objects.
        part_size = max(self._part_size, -(-size // _MAX_PARTS))
        upload_id = client.create_multipart_upload(
            Bucket=self._bucket, Key=key, ChecksumAlgorithm="CRC32"
        )["UploadId"]
        try:
            parts: list[CompletedPartTypeDef] = []
            for number, offset in enumerate(range(0, size, part_size), start=1):
                body = bytes(view[offset : offset + part_size])
                answer = client.upload_part(
                    Bucket=self._bucket,
                    Key=key,
                    UploadId=upload_id,
                    PartNumber=number,
                    Body=body,
                    ChecksumAlgorithm="CRC32",
                )
                part: CompletedPartTypeDef = {"ETag": answer["ETag"], "PartNumber": number}
                if "ChecksumCRC32" in answer:
                    part["ChecksumCRC32"] = answer["ChecksumCRC32"]
                parts.append(part)
            try:
                client.complete_multipart_upload(
                    Bucket=self._bucket,
                    Key=key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                    IfNoneMatch="*",
                )
            except ClientError as exc:
                self._check_conditional(exc, key)
                raise
        except BaseException:
            self._abort(client, key, upload_id)
            raise

    def _abort(self, client: S3Client, key: str, upload_id: str) -> None:
        """Best effort: the write failed already; a lifecycle rule catches leftovers."""
        try:
            client.abort_multipart_upload(Bucket=self._bucket, Key=key, UploadId=upload_id)
        except (ClientError, BotoCoreError) as exc:
            _log.warning(
                "%s: could not abort multipart upload %s of %r (%s); "
                "a bucket lifecycle rule should expire it",
                self.describe(),
                upload_id,
                key,
                exc,
            )

    # -- reading -------------------------------------------------------------------

    def get(self, name: str, start: int = 0, end: int | None = None) -> bytes:
        key = self._key(name)
        if start < 0 or (end is not None and end < start):
            raise ValueError(f"bad range [{start}, {end}) for {name!r}")
        if start == 0 and end is None:
            ranged = None
        elif end is None:
            ranged = f"bytes={start}-"
        else:
            # An empty range cannot be asked for; ask one byte to learn the object
            # exists and return nothing.
            ranged = f"bytes={start}-{max(start, end - 1)}"
        client = self._client()
        try:
            if ranged is None:
                answer = client.get_object(Bucket=self._bucket, Key=key)
            else:
                answer = client.get_object(Bucket=self._bucket, Key=key, Range=ranged)
            data = answer["Body"].read()
        except ClientError as exc:
            code, status = _error_code(exc)
            if code == "NoSuchKey":
                raise ObjectNotFound(f"{self.describe()}: no object {name!r}") from exc
            if status == 416 or code == "InvalidRange":
                return b""  # the object exists and ends before ``start``
            raise self._failure("read", name, exc) from exc
        except (BotoCoreError, OSError) as exc:
            raise self._failure("read", name, exc) from exc
        if ranged is not None and answer["ResponseMetadata"]["HTTPStatusCode"] == 200:
            # A store that ignored the Range header sent the whole object.
            data = data[start:end]
        elif end is not None:
            data = data[: end - start]
        return data

    def list(self, prefix: str) -> list[ObjectInfo]:
        if prefix.startswith("/"):
            raise ValueError(f"prefix {prefix!r} is absolute")
        client = self._client()
        found: list[ObjectInfo] = []
        cut = len(self._prefix)
        try:
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=self._bucket, Prefix=self._prefix + prefix
            )
            for page in pages:
                for item in page.get("Contents", []):
                    key = item.get("Key", "")
                    if key.endswith("/"):
                        continue  # a "folder" marker some consoles create
                    found.append(ObjectInfo(key[cut:], int(item.get("Size", 0))))
        except (ClientError, BotoCoreError) as exc:
            raise self._failure("list", prefix, exc) from exc
        found.sort(key=lambda info: info.name)
        return found

    # -- deleting ------------------------------------------------------------------

    def delete(self, names: Sequence[str]) -> None:
        keys = [self._key(name) for name in names]
        client = self._client()
        for first in range(0, len(keys), _DELETE_BATCH):
            batch = keys[first : first + _DELETE_BATCH]
            objects: list[ObjectIdentifierTypeDef] = [{"Key": key} for key in batch]
            try:
                answer = client.delete_objects(
                    Bucket=self._bucket, Delete={"Objects": objects, "Quiet": True}
                )
            except (ClientError, BotoCoreError) as exc:
                raise self._failure("delete", batch[0][len(self._prefix) :], exc) from exc
            errors = [e for e in answer.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                shown = ", ".join(
                    f"{e.get('Key', '?')[len(self._prefix) :]!r}: "
                    f"{e.get('Code')} {e.get('Message', '')}"
                    for e in errors[:3]
                )
                raise BackendError(
                    f"{self.describe()}: cannot delete {len(errors)} of {len(batch)} "
                    f"objects: {shown}"
                )
