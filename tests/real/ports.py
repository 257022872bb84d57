"""Loopback ports for the servers the real tests start."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port nothing listens on right now (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
