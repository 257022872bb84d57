"""Python source from the catalog, run as a tool in an isolated child process.

The source runs under ``python -I -c`` (isolated mode: no user site, no
``PYTHON*`` variables, no current directory on ``sys.path``), reads the
arguments as JSON on stdin and writes its result to stdout. By default it
runs in a bubblewrap sandbox (:mod:`pilothouse.tools._sandbox`): no network,
none of the server's files, processes or environment. A deployment that
opts out (``trusted``) runs it as a plain child with a minimal environment
built from an allow-list, never a copy of ours, and a fresh temporary home.

A script that outlives its timeout is killed together with anything it
started: its process group and every descendant process.
"""

from __future__ import annotations

__all__ = ["DEFAULT_SCRIPT_TIMEOUT", "ScriptTool"]

import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, Process

from pilothouse.catalog._enums import ExecutionPolicy, ToolKind
from pilothouse.tools._base import ToolContext, ToolDefinition, ToolResult
from pilothouse.tools._rest import DEFAULT_MAX_RESPONSE_BYTES
from pilothouse.tools._sandbox import ScriptSandbox

DEFAULT_SCRIPT_TIMEOUT = 10.0
"""Seconds a script may run when its settings do not say."""

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
        timeout: seconds before the process is killed.
        max_output_bytes: longer stdout is truncated.
        sandbox: where it runs (the bubblewrap sandbox by default).
        language: ``python`` or ``javascript`` (run on Node, same sandbox).
    """

    def __init__(
        self,
        definition: ToolDefinition,
        source: str,
        policy: ExecutionPolicy,
        *,
        timeout: float = DEFAULT_SCRIPT_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        sandbox: ScriptSandbox | None = None,
        language: str = "python",
    ) -> None:
        self._sandbox = sandbox if sandbox is not None else ScriptSandbox.for_mode("sandbox")
        self._language = language
        self._definition = definition
        self._source = source
        self._policy = policy
        self._timeout = timeout
        self._max_output_bytes = max_output_bytes

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

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        """Run the script with ``arguments`` as JSON on stdin.

        Args:
            arguments: the model's (already validated) arguments.
            context: where the call happens (unused: the script's own
                timeout governs, the loop enforces the call's).

        Returns:
            stdout, parsed as JSON into ``data`` when it is JSON;
            ``tool.exec.timeout`` when killed, ``tool.exec.exit`` with
            stderr's tail on a non-zero exit status.
        """
        del context
        stdin = json.dumps(dict(arguments), ensure_ascii=False).encode()
        with tempfile.TemporaryDirectory(prefix="pilothouse-script-") as home:
            process = await anyio.open_process(
                self._sandbox.command(self._source, home, self._language),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=home,
                env=_child_environment(home),
                start_new_session=True,
            )
            try:
                outcome = await self._communicate(process, stdin)
            finally:
                await _reap(process)
        if outcome is None:
            return ToolResult(
                content=f"script timed out after {self._timeout:g} s and was killed",
                is_error=True,
                error_code="tool.exec.timeout",
            )
        stdout, stdout_total, stderr = outcome
        if process.returncode != 0:
            tail = stderr.decode(errors="replace").strip()[-_STDERR_TAIL:]
            return ToolResult(
                content=f"script exited with status {process.returncode}: {tail}".strip(),
                is_error=True,
                error_code="tool.exec.exit",
            )
        text = stdout.decode(errors="ignore" if stdout_total > len(stdout) else "replace")
        if stdout_total > len(stdout):
            return ToolResult(content=f"{text}…[truncated: {len(stdout)} of {stdout_total} bytes]")
        text = text.strip()
        try:
            return ToolResult(content=text, data=json.loads(text))
        except ValueError:
            return ToolResult(content=text, data=text)

    async def _communicate(self, process: Process, stdin: bytes) -> tuple[bytes, int, bytes] | None:
        """Feed stdin, collect stdout (capped) and stderr; None when out of time."""
        out: list[tuple[bytes, int]] = []
        err: list[tuple[bytes, int]] = []
        with anyio.move_on_after(self._timeout) as scope:
            async with anyio.create_task_group() as group:
                assert process.stdout is not None and process.stderr is not None
                group.start_soon(_drain, process.stdout, self._max_output_bytes, out)
                # stderr only ever shows its tail, but it is capped the same way.
                group.start_soon(_drain, process.stderr, self._max_output_bytes, err)
                if process.stdin is not None:
                    try:
                        await process.stdin.send(stdin)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                        pass  # the script exited without reading its arguments: allowed
                    await process.stdin.aclose()
                await process.wait()
        if scope.cancelled_caught:
            return None
        return out[0][0], out[0][1], err[0][0]


async def _drain(stream: ByteReceiveStream, limit: int, into: list[tuple[bytes, int]]) -> None:
    kept = bytearray()
    total = 0
    async for chunk in stream:
        total += len(chunk)
        room = limit - len(kept)
        if room > 0:
            kept += chunk[:room]
    into.append((bytes(kept), total))


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
