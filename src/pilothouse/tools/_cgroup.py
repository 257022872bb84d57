"""A pids cgroup per script run, where this process may create one.

``RLIMIT_NPROC`` does not hold for a process whose real user is root (the
kernel exempts it), so a server running as root needs the ``pids``
controller to cap a script's processes. It is used where the process's own
``pids`` cgroup is writable: cgroup v1's ``pids`` hierarchy, or a cgroup v2
one whose ``cgroup.subtree_control`` already enables ``pids`` for its
children (a delegated subtree). Each run gets a child cgroup with
``pids.max`` set, entered by the run's first process before it executes
anything, and removed when the run is over.
"""

from __future__ import annotations

__all__ = ["PidsCgroup", "find_pids_cgroup"]

import contextlib
import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

_log = logging.getLogger("pilothouse.tools.script")

_REMOVE_TRIES = 50
"""Tries (10 ms apart) to remove a run's cgroup while its killed processes finish exiting."""


def _mounts() -> list[tuple[str, str, str]]:
    """``(mount point, file system type, super options)`` of each cgroup mount."""
    found: list[tuple[str, str, str]] = []
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        for line in info:
            head, _, tail = line.partition(" - ")
            parts, rest = head.split(), tail.split()
            if len(parts) > 4 and len(rest) > 2 and rest[0] in ("cgroup", "cgroup2"):
                found.append((parts[4], rest[0], rest[2]))
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under ``""`` its v2 one."""
    paths: dict[str, str] = {}
    with open("/proc/self/cgroup", encoding="utf-8") as lines:
        for line in lines:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if not controllers:
                paths[""] = path
            for controller in controllers.split(","):
                if controller:
                    paths[controller] = path
    return paths


def _candidate() -> Path | None:
    """The pids cgroup directory of this process, where children could hold ``pids.max``."""
    paths = _own_paths()
    for point, kind, options in _mounts():
        if kind == "cgroup" and "pids" in options.split(",") and "pids" in paths:
            return Path(point) / paths["pids"].lstrip("/")
    for point, kind, _ in _mounts():
        if kind == "cgroup2" and "" in paths:
            base = Path(point) / paths[""].lstrip("/")
            control = base / "cgroup.subtree_control"
            with contextlib.suppress(OSError):
                if "pids" in control.read_text(encoding="ascii").split():
                    return base
    return None


def find_pids_cgroup() -> Path | None:
    """The directory runs' pids cgroups are made in, or None when this process cannot make them.

    Checked by making (and removing) one child cgroup, so a read-only or
    foreign hierarchy reports None rather than failing later.
    """
    try:
        base = _candidate()
    except OSError as exc:
        _log.debug("cgroups unreadable: %s", exc)
        return None
    if base is None:
        return None
    probe = base / f"pilothouse-probe-{uuid.uuid4().hex[:12]}"
    try:
        probe.mkdir()
    except OSError:
        return None
    try:
        if not (probe / "pids.max").exists():
            return None
    finally:
        probe.rmdir()
    return base


@dataclass(frozen=True)
class PidsCgroup:
    """One run's pids cgroup.

    Attributes:
        path: its directory.
    """

    path: Path

    @classmethod
    def create(cls, base: Path, limit: int) -> PidsCgroup:
        """Make a child of ``base`` that holds at most ``limit`` processes and threads."""
        path = base / f"pilothouse-script-{uuid.uuid4().hex}"
        path.mkdir()
        (path / "pids.max").write_text(str(limit), encoding="ascii")
        return cls(path)

    def enter_command(self) -> list[str]:
        """A command prefix that moves itself into the cgroup, then executes the rest.

        The shell writes its own pid before ``exec``, so nothing the run
        starts can be outside the cgroup (a pid written after the start
        would miss whatever forked before it).
        """
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs")]

    def reached(self) -> bool:
        """Whether a fork was refused because the cgroup was full."""
        with contextlib.suppress(OSError, ValueError):
            for line in (self.path / "pids.events").read_text(encoding="ascii").splitlines():
                name, _, count = line.partition(" ")
                if name == "max":
                    return int(count) > 0
        return False

    def kill(self) -> None:
        """SIGKILL every process still in the cgroup."""
        with contextlib.suppress(OSError):
            for pid in (self.path / "cgroup.procs").read_text(encoding="ascii").split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)

    def remove(self) -> None:
        """Kill what is left and remove the cgroup (killed processes take a moment to leave)."""
        for _ in range(_REMOVE_TRIES):
            self.kill()
            try:
                self.path.rmdir()
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)
                continue
            return
        _log.warning("could not remove the script cgroup %s; it is left empty of work", self.path)
