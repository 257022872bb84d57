"""Where script tools run: a bubblewrap sandbox, or (opted in) a plain child process.

A script tool's source comes from the catalog, which a tenant's admin key
can write; run as a plain child it could read the server's ``/proc``, its
environment, the secrets file and the database. In the sandbox it runs in
new user, PID, network, IPC and UTS namespaces (``bwrap --unshare-all``)
with a fresh ``/proc``, an empty ``/tmp``, no network, a cleared environment
and, read-only, only the system's ``/usr`` and the Python installation: none
of the server's files exist there.

The deployment chooses (``PILOTHOUSE_SCRIPT_TOOLS``): ``sandbox`` (the
default; script tools are refused where ``bwrap`` is missing), ``trusted``
(a plain child with an allow-listed environment, for single-tenant
deployments that trust every catalog writer) or ``off``.

Each run is also limited (:class:`~pilothouse.tools._limits.ScriptLimits`):
``prlimit`` sets its rlimits (memory, CPU, file size and, in the sandbox,
processes, counted in the sandbox's own user namespace) just before the
script starts; the sandbox's ``/tmp`` and ``/dev/shm`` are tmpfs of a fixed
size and its root is read-only; and where this process may create ``pids``
cgroups, each run gets one with ``pids.max`` set, which also holds when the
server runs as root (the kernel exempts root from ``RLIMIT_NPROC``).
:meth:`ScriptSandbox.enforcement` says which of these is in force.
"""

from __future__ import annotations

__all__ = ["SCRIPT_LANGUAGES", "ScriptSandbox", "ScriptToolsMode"]

import functools
import logging
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pilothouse.tools._cgroup import find_pids_cgroup
from pilothouse.tools._limits import ScriptLimits

_log = logging.getLogger("pilothouse.tools.script")

_MIB = 1024 * 1024

_V8_RESERVE_MIB = 1024
"""Address space Node's V8 reserves (its code range) beyond what it allocates.

With its address space capped at the memory limit alone Node does not start
("Failed to reserve virtual memory for CodeRange"), so a javascript tool's
memory is capped by ``RLIMIT_DATA`` and its address space by the limit plus this.
"""

ScriptToolsMode = Literal["sandbox", "trusted", "off"]
"""How a deployment runs script tools (``Settings.script_tools``)."""

_SETTING = "PILOTHOUSE_SCRIPT_TOOLS"

SCRIPT_LANGUAGES = ("python", "javascript")
"""The languages a script tool's ``settings.language`` may name (genai-4j's two)."""


def _node() -> str | None:
    """Node.js for javascript tools: ``node`` on PATH (the sandbox binds /usr)."""
    found = shutil.which("node")
    return os.path.realpath(found) if found else None


@dataclass(frozen=True)
class ScriptSandbox:
    """Builds the command line of one script run for the deployment's mode.

    Attributes:
        mode: ``sandbox``, ``trusted`` or ``off``.
        bwrap: the bubblewrap executable (None: not installed).
        limits: the deployment's ceilings, and what a tool gets by default.
        prlimit: util-linux's ``prlimit``, which sets each run's rlimits
            (None: not installed; script tools are then refused).
        cgroup: where each run's pids cgroup is made (None: this process
            cannot make them).
    """

    mode: ScriptToolsMode = "sandbox"
    bwrap: str | None = None
    limits: ScriptLimits = field(default_factory=ScriptLimits)
    prlimit: str | None = field(default_factory=lambda: _which("prlimit"))
    cgroup: Path | None = None

    @classmethod
    def for_mode(cls, mode: ScriptToolsMode, limits: ScriptLimits | None = None) -> ScriptSandbox:
        """The runner for ``mode``, with ``bwrap`` and ``prlimit`` looked up on ``PATH``.

        Args:
            mode: the deployment's ``Settings.script_tools``.
            limits: the deployment's ceilings (``ScriptLimits.ceilings``);
                the built-in ones when None.
        """
        return cls(
            mode=mode,
            bwrap=shutil.which("bwrap") if mode == "sandbox" else None,
            limits=limits if limits is not None else ScriptLimits(),
            cgroup=find_pids_cgroup() if mode != "off" else None,
        )

    def enforcement(self) -> str:
        """How each limit is enforced here: one line for the start-up log and diagnostics."""
        if self.mode == "off" or self.refusal() is not None:
            return "script tools cannot run here"
        sandboxed = self.mode == "sandbox"
        if self.cgroup is not None:
            processes = f"pids cgroup per run under {self.cgroup}"
        elif sandboxed and os.geteuid() != 0:
            processes = "RLIMIT_NPROC in the sandbox's user namespace"
        else:
            processes = (
                "NOT ENFORCED (root is exempt from RLIMIT_NPROC and no pids cgroup is "
                "writable" + (")" if sandboxed else "; trusted mode sets no RLIMIT_NPROC)")
            )
        disk = (
            f"tmpfs of {self.limits.tmp_mib} MiB on /tmp and /dev/shm, read-only root"
            if sandboxed
            else f"RLIMIT_FSIZE {self.limits.tmp_mib} MiB per file"
        )
        return (
            f"script tools: {'bubblewrap sandbox' if sandboxed else 'trusted child process'}; "
            f"processes: {processes}; memory: RLIMIT_AS/RLIMIT_DATA per process; "
            f"CPU: RLIMIT_CPU per process; disk: {disk}; wall time and output: the server; "
            f"ceilings: {self.limits.describe()}"
        )

    def log_enforcement(self) -> None:
        """Log :meth:`enforcement` once at start: WARNING when a limit is not enforced."""
        line = self.enforcement()
        _log.log(logging.WARNING if "NOT ENFORCED" in line else logging.INFO, "%s", line)

    def refusal(self) -> str | None:
        """Why script tools cannot run here (None when they can)."""
        if self.mode == "off":
            return (
                f"script tools are turned off in this deployment ({_SETTING}=off); "
                "use a python or rest tool, or ask the operator to enable them"
            )
        if self.mode == "sandbox" and self.bwrap is None:
            return (
                "script tools run in a bubblewrap sandbox and 'bwrap' is not installed "
                "(apt-get install bubblewrap); a single-tenant deployment that trusts every "
                f"catalog writer may set {_SETTING}=trusted instead"
            )
        if self.prlimit is None:
            return (
                "script tools run under resource limits that util-linux's 'prlimit' sets, "
                "and it is not installed (apt-get install util-linux)"
            )
        if self.mode == "sandbox" and self.bwrap is not None and not _sizes_tmpfs(self.bwrap):
            return (
                f"the sandbox's /tmp needs a size limit ('bwrap --size'), which {self.bwrap} "
                "does not offer: it needs bubblewrap 0.7 or later, not installed setuid"
            )
        if self.mode == "sandbox" and self.bwrap is not None:
            problem = _sandbox_problem(self.bwrap)
            if problem is not None:
                return (
                    f"bubblewrap cannot make the sandbox here ({problem}): the process may "
                    "not create user namespaces or mount /proc in them; in a container allow "
                    "them (compose.yaml's security_opt, or the Kubernetes securityContext "
                    "in docs/operations.md), or on the host allow unprivileged user "
                    "namespaces"
                )
        return None

    def language_refusal(self, language: str) -> str | None:
        """Why a script in ``language`` cannot run here (None when it can)."""
        if language not in SCRIPT_LANGUAGES:
            return (
                f"settings.language '{language}' is not a script language; "
                f"write one of {', '.join(SCRIPT_LANGUAGES)}"
            )
        if language == "javascript" and _node() is None:
            return "javascript script tools run on Node.js and 'node' is not installed"
        return None

    def command(
        self,
        source: str,
        home: str,
        language: str = "python",
        limits: ScriptLimits | None = None,
    ) -> list[str]:
        """The command that runs ``source`` (Python, or JavaScript on Node); ``home`` is its folder.

        In the sandbox ``home`` is not used: the script gets an empty
        ``/tmp`` of its own. Both languages run under the same sandbox and
        the same limits (``limits``; the deployment's ceilings when None).
        The pids cgroup, when there is one, is the caller's to add.
        """
        limits = limits if limits is not None else self.limits
        node = _node() if language == "javascript" else None
        if language == "javascript" and node is None:
            raise RuntimeError("javascript script tools need 'node' on PATH")
        if self.prlimit is None:
            raise RuntimeError("script tools need util-linux's 'prlimit' on PATH")
        sandboxed = self.mode == "sandbox" and self.bwrap is not None
        rlimits = _rlimits(self.prlimit, limits, node is not None, processes=sandboxed)
        if not sandboxed:
            if node is not None:
                return [*rlimits, node, "-e", source]
            return [*rlimits, sys.executable, "-I", "-c", source]
        assert self.bwrap is not None
        # The installation's own interpreter, not a virtual environment's
        # (whose folder, under the project, must not be in the sandbox).
        base: object = getattr(sys, "_base_executable", sys.executable)
        interpreter = os.path.realpath(str(base))
        prefix = os.path.realpath(sys.base_prefix)
        binds: list[str] = ["--ro-bind", "/usr", "/usr"]
        for link in ("lib", "lib64", "bin", "sbin"):
            target = Path("/") / link
            if target.is_symlink():
                binds += ["--symlink", os.readlink(target), f"/{link}"]
            elif target.is_dir():
                binds += ["--ro-bind", str(target), f"/{link}"]
        if not prefix.startswith("/usr/"):
            # A Python installed outside /usr (pyenv, a container's /opt):
            # its own tree only, read-only.
            binds += ["--ro-bind", prefix, prefix]
        for name in ("/etc/ld.so.cache", "/etc/localtime"):
            if Path(name).exists():
                binds += ["--ro-bind", name, name]
        for program_path in (node, self.prlimit):
            if program_path is not None and not program_path.startswith("/usr/"):
                # Installed elsewhere: its own folder only, read-only.
                folder = str(Path(program_path).parent)
                binds += ["--ro-bind", folder, folder]
        program = [node, "-e", source] if node is not None else [interpreter, "-I", "-c", source]
        size = str(limits.tmp_mib * _MIB)
        return [
            self.bwrap,
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
            *binds,
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            # Sized tmpfs: on the host they would be RAM without a bound.
            "--size",
            size,
            "--tmpfs",
            "/tmp",
            "--size",
            size,
            "--tmpfs",
            "/dev/shm",
            # The root and /dev are tmpfs too: read-only, so the sized
            # mounts are the only places the script can write.
            "--remount-ro",
            "/",
            "--remount-ro",
            "/dev",
            "--chdir",
            "/tmp",
            "--setenv",
            "HOME",
            "/tmp",
            "--setenv",
            "TMPDIR",
            "/tmp",
            "--setenv",
            "PATH",
            "/usr/local/bin:/usr/bin:/bin",
            "--setenv",
            "LANG",
            "C.UTF-8",
            "--setenv",
            "PYTHONUTF8",
            "1",
            *rlimits,
            *program,
        ]


@functools.cache
def _sizes_tmpfs(bwrap: str) -> bool:
    """Whether ``bwrap`` takes ``--size`` (0.7 on; refused when it is installed setuid)."""
    if os.stat(bwrap).st_mode & stat.S_ISUID:
        return False
    shown = subprocess.run(
        [bwrap, "--help"], capture_output=True, text=True, timeout=10, check=False
    )
    return "--size" in shown.stdout + shown.stderr


@functools.cache
def _sandbox_problem(bwrap: str) -> str | None:
    """Why ``bwrap`` cannot make the sandbox's namespaces and ``/proc`` here (None: it can).

    Installed is not enough: a container's default seccomp profile refuses
    the user namespace, and its masked ``/proc`` keeps a new one from being
    mounted; both show only when a sandbox is made, so one is made (and
    exits at once) with the namespaces and mounts every run uses.
    """
    probe = [
        bwrap,
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--",
        "true",
    ]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{bwrap} did not run: {exc}"
    if done.returncode == 0:
        return None
    said = (done.stderr.strip() or done.stdout.strip()).splitlines()
    return said[-1] if said else f"{bwrap} exited with code {done.returncode}"


def _which(name: str) -> str | None:
    found = shutil.which(name)
    return os.path.realpath(found) if found else None


def _rlimits(prlimit: str, limits: ScriptLimits, javascript: bool, *, processes: bool) -> list[str]:
    """``prlimit`` with the run's rlimits, to put before the program.

    Set inside the sandbox, after bubblewrap made its user namespace, so
    ``RLIMIT_NPROC`` counts the sandbox's own processes rather than every
    process of the server's user. A trusted child shares the server's user:
    there ``RLIMIT_NPROC`` would count the server's own threads, so it is
    left to the pids cgroup. The soft CPU limit sends SIGXCPU, the hard one
    a second later SIGKILL.
    """
    memory = limits.memory_mib * _MIB
    address = memory + _V8_RESERVE_MIB * _MIB if javascript else memory
    command = [
        prlimit,
        f"--as={address}",
        f"--data={memory}",
        f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}",
        f"--fsize={limits.tmp_mib * _MIB}",
        "--core=0",
    ]
    if processes:
        command.append(f"--nproc={limits.processes}")
    return [*command, "--"]
