"""A moto S3 server in a process of its own, for the tier benchmark.

moto serves S3 from Python threads. In the benchmark's process they would share the GIL
with the store under test, and the benchmark would measure moto's CPU as the uploader's
cost; a broker's real S3 is elsewhere. Here moto runs in a child process (on the other
core of a two-core machine) that starts :func:`rocketcluster.e2e.s3server.running_s3_server`,
creates one bucket, prints one JSON line with the endpoint, and serves until its stdin
closes — so it also ends when the benchmark dies. The benchmark, and the broker
processes it starts, talk to moto directly (``backend_endpoint``), not through the test
gate's relay threads.

moto comes with the ``rocketcluster-e2e`` workspace member (test support, never shipped).
"""

from __future__ import annotations

import contextlib
import json
import select
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["S3Endpoint", "s3_server_process"]

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class S3Endpoint:
    endpoint: str
    bucket: str
    access_key: str
    secret_key: str
    region: str
    pid: int

    def environment(self) -> dict[str, str]:
        """The variables a broker process reads its S3 credentials from (on a pod they
        come from ``s3.credentialsSecret``; a local broker inherits rocketctl's)."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}


@contextlib.contextmanager
def s3_server_process(bucket: str) -> Iterator[S3Endpoint]:
    """A moto S3 server in a child process with ``bucket`` made; stopped (by closing its
    stdin, then by its PID if it does not end) on exit."""
    proc = subprocess.Popen(
        [sys.executable, "-m", __name__, bucket],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield _started(proc, bucket)
    finally:
        _stop(proc)


def _started(proc: subprocess.Popen[str], bucket: str) -> S3Endpoint:
    if proc.stdout is None:
        raise RuntimeError("the moto S3 server process has no stdout pipe")
    ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
    line = proc.stdout.readline() if ready else ""
    if not line:
        code = proc.poll()
        why = f"exited with {code}" if code is not None else f"silent for {START_TIMEOUT_S:.0f}s"
        raise RuntimeError(
            f"the moto S3 server process {why} (it needs moto from the rocketcluster-e2e "
            "workspace member)"
        )
    info = json.loads(line)
    return S3Endpoint(
        endpoint=info["endpoint"],
        bucket=bucket,
        access_key=info["access_key"],
        secret_key=info["secret_key"],
        region=info["region"],
        pid=proc.pid,
    )


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: python -m {__name__} BUCKET", file=sys.stderr)
        return 2
    from rocketcluster.e2e.s3server import running_s3_server

    with running_s3_server() as server:
        server.create_bucket(argv[1])
        info = {
            "endpoint": server.backend_endpoint,
            "access_key": server.access_key,
            "secret_key": server.secret_key,
            "region": server.region,
        }
        print(json.dumps(info), flush=True)
        sys.stdin.read()  # until the benchmark closes it (or dies)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
