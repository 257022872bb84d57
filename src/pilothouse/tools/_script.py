"""Python source from the catalog, run as a tool in an isolated child process.

The source runs under ``python -I -c`` (isolated mode: no user site, no
``PYTHON*`` variables, no current directory on ``sys.path``), reads the
arguments as JSON on stdin and writes its result to stdout. By default it
runs in a bubblewrap sandbox (:mod:`pilothouse.tools._sandbox`): no network,
none of the server's files, processes or environment. A deployment that
opts out (``trusted``) runs it as a plain child with a minimal environment
built from an allow-list, never a copy of ours, and a fresh temporary home.

A script that outlives its timeout, or prints more than its output limit,
is killed together with anything it started: its process group, every
descendant process and its pids cgroup. Its other limits (processes,
memory, CPU time, ``/tmp`` size; :class:`~pilothouse.tools._limits.ScriptLimits`)
are the kernel's to enforce; a run that hit one ends with
``tool.exec.limit`` naming it.
"""

from __future__ import annotations

__all__ = ["DEFAULT_SCRIPT_TIMEOUT", "ScriptTool"]

import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, Process

from pilothouse.catalog._enums import ExecutionPolicy, ToolKind
from pilothouse.tools._base import ToolContext, ToolDefinition, ToolResult
from pilothouse.tools._cgroup import PidsCgroup
from pilothouse.tools._limits import DEFAULT_SCRIPT_TIMEOUT, ScriptLimits
from pilothouse.tools._sandbox import ScriptSandbox

_STDERR_TAIL = 2000
"""Characters of stderr shown when a script fails."""

_INHERITED = ("PATH", "LANG", "LC_ALL", "TZ")
"""Variables the child may see: what locating programs and decoding text need."""


def _child_environment(home: str) -> dict[str, str]:
    env = {name: os.environ[name] for name in _INHERITED if name in os.environ}
    env.setdefault("PATH", os.defpath)
    env.setdefault("LANG", "C.UTF-8")
    env["HOME"] = home
    env["TMPDIR"] = home
    # -I ignores PYTHON* variables, but the encoding must hold whatever the locale.
    env["PYTHONUTF8"] = "1"
    return env


class ScriptTool:
    """Catalog-stored Python source the run loop can call; satisfies ``ExecutableTool``.

    Args:
        definition: what the model sees.
        source: the Python source.
        policy: the execution policy.
        timeout: seconds before the process is killed (overrides ``limits``).
        max_output_bytes: at the first byte of stdout or stderr past it the
            script is killed (overrides ``limits``).
        sandbox: where it runs (the bubblewrap sandbox by default).
        language: ``python`` or ``javascript`` (run on Node, same sandbox).
        limits: what the run may use; by default the sandbox's ceilings
            with a 10 s timeout and 64 KiB of output.
    """

    def __init__(
        self,
        definition: ToolDefinition,
        source: str,
        policy: ExecutionPolicy,
        *,
        timeout: float | None = None,
        max_output_bytes: int | None = None,
        sandbox: ScriptSandbox | None = None,
        language: str = "python",
        limits: ScriptLimits | None = None,
    ) -> None:
        self._sandbox = sandbox if sandbox is not None else ScriptSandbox.for_mode("sandbox")
        self._language = language
        self._definition = definition
        self._source = source
        self._policy = policy
        chosen = limits if limits is not None else self._sandbox.limits.for_tool({}, "")
        if timeout is not None:
            chosen = replace(chosen, timeout=timeout)
        if max_output_bytes is not None:
            chosen = replace(chosen, output_bytes=max_output_bytes)
        self._limits = chosen

    @property
    def definition(self) -> ToolDefinition:
        """What the model sees."""
        return self._definition

    @property
    def kind(self) -> ToolKind:
        """Always :attr:`ToolKind.SCRIPT`."""
        return ToolKind.SCRIPT

    @property
    def policy(self) -> ExecutionPolicy:
        """Whether it may run without an authorizer's yes."""
        return self._policy

    @property
    def limits(self) -> ScriptLimits:
        """What one run may use."""
        return self._limits

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        """Run the script with ``arguments`` as JSON on stdin.

        Args:
            arguments: the model's (already validated) arguments.
            context: where the call happens (unused: the script's own
                timeout governs, the loop enforces the call's).

        Returns:
            stdout, parsed as JSON into ``data`` when it is JSON;
            ``tool.exec.timeout`` when killed at its wall-time limit,
            ``tool.exec.limit`` when it hit another limit (named in the
            content), ``tool.exec.exit`` with stderr's tail on another
            non-zero exit status.
        """
        del context
        stdin = json.dumps(dict(arguments), ensure_ascii=False).encode()
        limits = self._limits
        cgroup = (
            PidsCgroup.create(self._sandbox.cgroup, limits.processes)
            if self._sandbox.cgroup is not None
            else None
        )
        try:
            with tempfile.TemporaryDirectory(prefix="pilothouse-script-") as home:
                command = self._sandbox.command(self._source, home, self._language, limits)
                if cgroup is not None:
                    command = [*cgroup.enter_command(), *command]
                process = await anyio.open_process(
                    command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=home,
                    env=_child_environment(home),
                    start_new_session=True,
                )
                try:
                    outcome = await self._communicate(process, stdin)
                    if outcome.timed_out:
                        # The script's processes: in the sandbox, bubblewrap's
                        # own two (outside and the namespace's init) are not.
                        found = len(_descendants(process.pid)) + 1
                        outcome.processes = found - 2 if self._sandbox.mode == "sandbox" else found
                finally:
                    await _reap(process)
            outcome.cgroup_full = cgroup is not None and cgroup.reached()
        finally:
            if cgroup is not None:
                # Removed even when the call was cancelled: a cgroup left
                # behind would hold a directory per run.
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(cgroup.remove)
        return self._result(outcome, process.returncode)

    def _result(self, outcome: _Outcome, returncode: int | None) -> ToolResult:
        """The tool result of a finished run."""
        limits = self._limits
        # Within one of the limit: in the sandbox, bubblewrap's init counts too.
        processes_hit = outcome.cgroup_full or outcome.processes >= limits.processes - 1
        if outcome.timed_out:
            note = (
                f"; it had reached its limit of {limits.processes} processes "
                "(settings.max_processes)"
                if processes_hit
                else ""
            )
            return ToolResult(
                content=(
                    f"script timed out after {limits.timeout:g} s, its wall-time limit "
                    f"(settings.timeout), and was killed{note}"
                ),
                is_error=True,
                error_code="tool.exec.timeout",
            )
        if outcome.over is not None:
            head = outcome.stdout.decode(errors="ignore")
            return ToolResult(
                content=(
                    f"script wrote more than {limits.output_bytes} bytes to {outcome.over}, "
                    "its output limit (settings.max_output_bytes), and was killed; "
                    f"its first {len(outcome.stdout)} bytes of stdout: {head}"
                ),
                is_error=True,
                error_code="tool.exec.limit",
            )
        tail = outcome.stderr.decode(errors="replace").strip()[-_STDERR_TAIL:]
        if returncode != 0:
            hit = _limit_hit(returncode, tail, limits, processes_hit, self._sandbox)
            status = f"script exited with status {returncode}: {tail}".strip()
            if hit is not None:
                return ToolResult(
                    content=f"script hit its {hit} and was stopped ({status})",
                    is_error=True,
                    error_code="tool.exec.limit",
                )
            return ToolResult(content=status, is_error=True, error_code="tool.exec.exit")
        text = outcome.stdout.decode(errors="replace").strip()
        try:
            return ToolResult(content=text, data=json.loads(text))
        except ValueError:
            return ToolResult(content=text, data=text)

    async def _communicate(self, process: Process, stdin: bytes) -> _Outcome:
        """Feed stdin and collect stdout and stderr, each up to the output limit.

        At the first byte past the limit reading stops, so the server never
        holds more than the limit (plus one read's chunk) of a script's output.
        """
        limit = self._limits.output_bytes
        out = _Capture("stdout", limit)
        err = _Capture("stderr", limit)
        outcome = _Outcome()
        with anyio.move_on_after(self._limits.timeout) as scope:
            async with anyio.create_task_group() as group:
                assert process.stdout is not None and process.stderr is not None

                async def drain(stream: ByteReceiveStream, capture: _Capture) -> None:
                    async for chunk in stream:
                        if not capture.add(chunk):
                            outcome.over = capture.name
                            group.cancel_scope.cancel()  # the caller kills the script
                            return

                group.start_soon(drain, process.stdout, out)
                group.start_soon(drain, process.stderr, err)
                if process.stdin is not None:
                    try:
                        await process.stdin.send(stdin)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                        pass  # the script exited without reading its arguments: allowed
                    await process.stdin.aclose()
                await process.wait()
        outcome.timed_out = scope.cancelled_caught and outcome.over is None
        outcome.stdout = bytes(out.kept)
        outcome.stderr = bytes(err.kept)
        return outcome


@dataclass
class _Capture:
    """One stream's bytes, up to a limit."""

    name: str
    limit: int
    kept: bytearray = field(default_factory=bytearray)

    def add(self, chunk: bytes) -> bool:
        """Keep ``chunk`` up to the limit; False when it went past it."""
        room = self.limit - len(self.kept)
        self.kept += chunk[: max(room, 0)]
        return len(chunk) <= room


@dataclass
class _Outcome:
    """What a run came to."""

    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    over: str | None = None
    """The stream that went past the output limit."""
    processes: int = 0
    """Processes alive when it was killed for time."""
    cgroup_full: bool = False


_MEMORY_SIGNS = (
    "MemoryError",
    "Cannot allocate memory",
    "out of memory",
    "Failed to reserve virtual memory",
    "Allocation failed",
)
_DISK_SIGNS = ("No space left on device", "File too large")
_PROCESS_SIGNS = ("Resource temporarily unavailable", "BlockingIOError")


def _limit_hit(
    returncode: int | None,
    stderr: str,
    limits: ScriptLimits,
    processes_hit: bool,
    sandbox: ScriptSandbox,
) -> str | None:
    """The limit a failed run hit, described with its setting; None when none shows.

    A signal says it for CPU time (SIGXCPU) and file size (SIGXFSZ); the
    other limits make a call fail, which the script's error output names.
    Bubblewrap exits with 128 plus the signal that ended the script.
    """
    number = -returncode if returncode is not None and returncode < 0 else 0
    if sandbox.mode == "sandbox" and returncode is not None and returncode > 128:
        number = returncode - 128
    disk = (
        f"/tmp size limit ({limits.tmp_mib} MiB, settings.max_tmp_mib)"
        if sandbox.mode == "sandbox"
        else f"file size limit ({limits.tmp_mib} MiB per file, settings.max_tmp_mib)"
    )
    if number == signal.SIGXCPU:
        return f"CPU time limit ({limits.cpu_seconds} s per process, settings.max_cpu_seconds)"
    if number == signal.SIGXFSZ or any(sign in stderr for sign in _DISK_SIGNS):
        return disk
    if processes_hit or any(sign in stderr for sign in _PROCESS_SIGNS):
        return f"process limit ({limits.processes} processes, settings.max_processes)"
    if any(sign in stderr for sign in _MEMORY_SIGNS):
        return f"memory limit ({limits.memory_mib} MiB per process, settings.max_memory_mib)"
    return None


async def _reap(process: Process) -> None:
    """Make sure the script and its children are gone, then wait for it."""
    if process.returncode is None:
        _kill_tree(process.pid)
    with anyio.CancelScope(shield=True):
        await process.wait()
        await process.aclose()


def _kill_tree(root: int) -> None:
    """SIGKILL ``root``, every process descended from it, and its process group.

    The process group alone is not enough: bubblewrap's sandbox starts its own
    session, and it only follows bubblewrap down (``--die-with-parent``) once
    its child has armed that, so a kill landing during the sandbox's start-up
    left the script running (seen under load). Every process found is stopped
    first, so none can fork or lose its parent between the scan and the kill;
    the scan repeats until it finds nothing new.
    """
    stopped: set[int] = set()
    while True:
        found = _descendants(root) | {root}
        new = found - stopped
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped |= new
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    try:
        os.killpg(root, signal.SIGKILL)
    except ProcessLookupError:
        pass  # the group had no member left


def _descendants(root: int) -> set[int]:
    """PIDs whose chain of parents leads to ``root``, from ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as stat:
                # The name in parentheses may hold spaces: the fields follow its last ')'.
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # it ended while we read
        children.setdefault(parent, []).append(int(entry.name))
    found: set[int] = set()
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), ()):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def _signal(pid: int, number: signal.Signals) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:
        pass  # it ended on its own meanwhile
