"""Script tools: result on stdout, timeout kill, no inherited secrets, failures."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from tool_rows import tool_row

from pilothouse.api import Pilothouse
from pilothouse.catalog._enums import ToolKind
from pilothouse.errors import CatalogValidationError
from pilothouse.providers._secrets import SecretResolver
from pilothouse.settings import Settings
from pilothouse.tools import ScriptTool, ToolContext, ToolError, ToolRegistry
from pilothouse.tools._limits import ScriptLimits
from pilothouse.tools._sandbox import ScriptSandbox, ScriptToolsMode

pytestmark = pytest.mark.anyio

CONTEXT = ToolContext(tenant="default", conversation_uuid="conv-1", call_id="call-1")


async def script(source: str, mode: ScriptToolsMode = "sandbox", **settings: Any) -> ScriptTool:
    registry = ToolRegistry(SecretResolver({}), script_sandbox=ScriptSandbox.for_mode(mode))
    built = await registry.from_catalog(
        tool_row(ToolKind.SCRIPT, name="script", implementation=source, settings=settings)
    )
    assert isinstance(built, ScriptTool)
    return built


@pytest.fixture
def planted_secret() -> Iterator[str]:
    value = "do-not-leak-9f2c"
    os.environ["PILOTHOUSE_TEST_SECRET"] = value
    try:
        yield value
    finally:
        del os.environ["PILOTHOUSE_TEST_SECRET"]


async def test_arguments_arrive_on_stdin_and_json_stdout_is_the_result() -> None:
    tool = await script(
        "import json, sys\n"
        "args = json.load(sys.stdin)\n"
        "print(json.dumps({'sum': args['a'] + args['b']}))\n"
    )
    result = await tool.execute({"a": 2, "b": 3}, CONTEXT)
    assert (result.is_error, result.content, result.data) == (False, '{"sum": 5}', {"sum": 5})


async def test_plain_text_stdout_is_the_result_as_text() -> None:
    result = await (await script("print('hello there')")).execute({}, CONTEXT)
    assert (result.content, result.data) == ("hello there", "hello there")


async def test_a_script_past_its_timeout_is_killed() -> None:
    tool = await script("import time\ntime.sleep(30)\n", timeout=0.5)
    started = time.monotonic()
    result = await tool.execute({}, CONTEXT)
    assert time.monotonic() - started < 5
    assert result.is_error
    assert result.error_code == "tool.exec.timeout"
    assert result.content == (
        "script timed out after 0.5 s, its wall-time limit (settings.timeout), and was killed"
    )


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            # A zombie is dead, only not yet reaped by its new parent.
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        # Reaped between open and read, the read fails with ESRCH.
        return False


def _marked_processes(marker: str) -> list[int]:
    """Host PIDs whose command line holds ``marker`` (the sandbox's too)."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and _alive(int(entry.name)):
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("mode", ["sandbox", "trusted"])
async def test_children_of_a_killed_script_die_with_it(mode: ScriptToolsMode) -> None:
    marker = f"pilothouse-orphan-{mode}-{os.getpid()}"
    tool = await script(
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)', '{marker}'])\n"
        "time.sleep(30)\n",
        mode,
        timeout=1.0,
    )
    result = await tool.execute({}, CONTEXT)
    assert result.error_code == "tool.exec.timeout"
    deadline = time.monotonic() + 5
    while _marked_processes(marker) and time.monotonic() < deadline:
        await anyio.sleep(0.05)
    assert _marked_processes(marker) == []


@pytest.mark.parametrize("mode", ["sandbox", "trusted"])
async def test_a_kill_during_the_sandbox_start_up_leaves_no_process(mode: ScriptToolsMode) -> None:
    # Before the whole tree was stopped and killed, a kill landing while
    # bubblewrap was still starting its sandbox left the script running (seen
    # in CI under load): tiny timeouts land there.
    marker = f"pilothouse-startup-{mode}-{os.getpid()}"
    source = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)', '{marker}'])\n"
        "time.sleep(30)\n"
    )
    for timeout in (0.002, 0.005, 0.01, 0.02, 0.05) * 4:
        result = await (await script(source, mode, timeout=timeout)).execute({}, CONTEXT)
        assert result.error_code == "tool.exec.timeout"
    deadline = time.monotonic() + 5
    while _marked_processes(marker) and time.monotonic() < deadline:
        await anyio.sleep(0.05)
    assert _marked_processes(marker) == []


@pytest.mark.parametrize("mode", ["sandbox", "trusted"])
async def test_the_script_does_not_inherit_our_secrets(
    planted_secret: str, mode: ScriptToolsMode
) -> None:
    tool = await script(
        "import json, os\n"
        "print(json.dumps({'secret': os.environ.get('PILOTHOUSE_TEST_SECRET'),"
        " 'names': sorted(os.environ), 'home': os.environ['HOME'], 'cwd': os.getcwd()}))\n",
        mode,
    )
    result = await tool.execute({}, CONTEXT)
    assert result.data["secret"] is None
    assert planted_secret not in result.content
    allowed = {"PATH", "LANG", "LC_ALL", "TZ", "HOME", "TMPDIR", "PYTHONUTF8", "LC_CTYPE", "PWD"}
    assert set(result.data["names"]) <= allowed
    assert result.data["home"] == result.data["cwd"]
    if mode == "sandbox":
        # The sandbox's own empty /tmp, gone with it.
        assert result.data["home"] == "/tmp"
    else:
        assert "pilothouse-script-" in result.data["home"]
        assert not os.path.exists(result.data["home"])


async def test_non_zero_exit_is_an_error_with_the_stderr_tail() -> None:
    tool = await script("import sys\nprint('partial')\nsys.exit('x' * 5000 + 'the end')\n")
    result = await tool.execute({}, CONTEXT)
    assert result.is_error
    assert result.error_code == "tool.exec.exit"
    assert result.content.startswith("script exited with status 1: xxx")
    assert result.content.endswith("the end")
    assert len(result.content) < 2100


async def test_an_exception_in_the_script_shows_its_traceback_tail() -> None:
    result = await (await script("raise ValueError('bad input')")).execute({}, CONTEXT)
    assert result.error_code == "tool.exec.exit"
    assert result.content.endswith("ValueError: bad input")


async def test_a_script_that_ignores_stdin_still_works() -> None:
    result = await (await script("print(1)")).execute({"big": "x" * 1_000_000}, CONTEXT)
    assert (result.is_error, result.data) == (False, 1)


async def test_output_past_the_limit_kills_the_script_and_is_an_error_naming_it() -> None:
    tool = await script("print('y' * 100, end='')", max_output_bytes=10)
    result = await tool.execute({}, CONTEXT)
    assert result.is_error
    assert result.error_code == "tool.exec.limit"
    assert result.content == (
        "script wrote more than 10 bytes to stdout, its output limit "
        "(settings.max_output_bytes), and was killed; its first 10 bytes of stdout: yyyyyyyyyy"
    )


@pytest.mark.parametrize(
    ("sandbox", "named"),
    [
        (ScriptSandbox(mode="sandbox", bwrap=None), "PILOTHOUSE_SCRIPT_TOOLS=trusted"),
        (ScriptSandbox(mode="off"), "PILOTHOUSE_SCRIPT_TOOLS=off"),
    ],
)
async def test_script_tools_without_a_sandbox_are_refused_naming_the_setting(
    sandbox: ScriptSandbox, named: str
) -> None:
    registry = ToolRegistry(SecretResolver({}), script_sandbox=sandbox)
    with pytest.raises(ToolError, match=named):
        await registry.from_catalog(
            tool_row(ToolKind.SCRIPT, name="script", implementation="print(1)")
        )


CEILINGS = ScriptLimits(
    timeout=30, output_bytes=4096, processes=20, memory_mib=256, cpu_seconds=5, tmp_mib=16
)


async def limited(**settings: Any) -> ScriptTool:
    sandbox = ScriptSandbox.for_mode("sandbox", CEILINGS)
    registry = ToolRegistry(SecretResolver({}), script_sandbox=sandbox)
    built = await registry.from_catalog(
        tool_row(ToolKind.SCRIPT, name="script", implementation="print(1)", settings=settings)
    )
    assert isinstance(built, ScriptTool)
    return built


async def test_a_tool_runs_at_the_ceilings_with_a_10_s_timeout_and_64_kib_at_most() -> None:
    assert (await limited()).limits == ScriptLimits(
        timeout=10, output_bytes=4096, processes=20, memory_mib=256, cpu_seconds=5, tmp_mib=16
    )


async def test_a_tool_may_lower_every_limit() -> None:
    tool = await limited(
        timeout=2.5,
        max_output_bytes=100,
        max_processes=3,
        max_memory_mib=64,
        max_cpu_seconds=1,
        max_tmp_mib=1,
    )
    assert tool.limits == ScriptLimits(
        timeout=2.5, output_bytes=100, processes=3, memory_mib=64, cpu_seconds=1, tmp_mib=1
    )


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        (
            "timeout",
            31,
            "settings.timeout: 31 is above this deployment's ceiling of 30 s "
            "(PILOTHOUSE_SCRIPT_MAX_TIMEOUT); write at most 30",
        ),
        (
            "max_output_bytes",
            1e10,
            "settings.max_output_bytes: 10000000000 is above this deployment's ceiling of "
            "4096 bytes (PILOTHOUSE_SCRIPT_MAX_OUTPUT_BYTES); write at most 4096",
        ),
        ("max_processes", 21, "(PILOTHOUSE_SCRIPT_MAX_PROCESSES); write at most 20"),
        ("max_memory_mib", 257, "(PILOTHOUSE_SCRIPT_MAX_MEMORY_MIB); write at most 256"),
        ("max_cpu_seconds", 6, "(PILOTHOUSE_SCRIPT_MAX_CPU_SECONDS); write at most 5"),
        ("max_tmp_mib", 17, "(PILOTHOUSE_SCRIPT_MAX_TMP_MIB); write at most 16"),
        ("max_processes", 2.5, "settings.max_processes: must be a positive whole number"),
        ("timeout", 0, "settings.timeout: must be a positive number (s)"),
        ("max_memory_mib", True, "settings.max_memory_mib: must be a positive whole number"),
    ],
)
async def test_a_limit_above_its_ceiling_or_not_a_number_is_refused_naming_both(
    setting: str, value: object, message: str
) -> None:
    with pytest.raises(ToolError, match=re.escape(message)):
        await limited(**{setting: value})


async def test_catalog_writes_above_a_ceiling_are_refused_naming_the_field(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'c.db'}", script_max_processes=8
    )
    tool = {"code": "T", "name": "t", "kind": "script", "implementation": "print(1)"}
    async with Pilothouse(settings) as ph:
        with pytest.raises(CatalogValidationError) as created:
            await ph.catalog.create("tools", {**tool, "settings": {"max_processes": 9}})
        with pytest.raises(CatalogValidationError) as imported:
            await ph.catalog.import_documents([{"tools": [{**tool, "settings": {"timeout": 61}}]}])
        # Checking files says so too, at the setting's line.
        path = tmp_path / "tools.yaml"
        path.write_text(
            "tools:\n  - code: T\n    name: t\n    kind: script\n    implementation: print(1)\n"
            "    settings: {max_cpu_seconds: 31}\n",
            encoding="utf-8",
        )
        with pytest.raises(CatalogValidationError) as checked:
            await ph.catalog.validate([path])
        # At the ceiling is allowed.
        await ph.catalog.create("tools", {**tool, "settings": {"max_processes": 8}})
    (issue,) = created.value.issues
    assert (issue.field, issue.code) == ("settings.max_processes", "T")
    assert "ceiling of 8 processes (PILOTHOUSE_SCRIPT_MAX_PROCESSES)" in issue.rule
    (issue,) = imported.value.issues
    assert issue.field == "settings.timeout"
    assert "ceiling of 60 s (PILOTHOUSE_SCRIPT_MAX_TIMEOUT)" in issue.rule
    (issue,) = checked.value.issues
    assert (issue.field, issue.line) == ("settings.max_cpu_seconds", 6)
    assert "ceiling of 30 s (PILOTHOUSE_SCRIPT_MAX_CPU_SECONDS)" in issue.rule


def test_a_bwrap_without_tmpfs_sizes_is_refused_naming_the_version(tmp_path: Path) -> None:
    old = tmp_path / "bwrap"
    old.write_text("#!/bin/sh\necho 'usage: bwrap [OPTIONS...] [--] COMMAND [ARGS...]'\n")
    old.chmod(0o755)
    refusal = ScriptSandbox(mode="sandbox", bwrap=str(old)).refusal()
    assert refusal is not None and "bubblewrap 0.7 or later" in refusal


@pytest.mark.parametrize("mode", ["sandbox", "trusted"])
def test_without_prlimit_script_tools_are_refused_naming_it(mode: ScriptToolsMode) -> None:
    sandbox = ScriptSandbox.for_mode(mode)
    if mode == "sandbox" and sandbox.bwrap is None:
        pytest.skip("bubblewrap is not installed")
    refusal = ScriptSandbox(mode=mode, bwrap=sandbox.bwrap, prlimit=None).refusal()
    assert refusal is not None and "'prlimit'" in refusal and "util-linux" in refusal


def test_the_run_loop_logs_how_each_limit_is_enforced(caplog: pytest.LogCaptureFixture) -> None:
    from pilothouse.runtime._toolset import CatalogToolSource

    caplog.set_level(logging.INFO, logger="pilothouse.tools.script")
    registry = ToolRegistry(SecretResolver({}))
    CatalogToolSource(SecretResolver({}), registry=registry, script_tools="trusted")
    (record,) = [r for r in caplog.records if r.name == "pilothouse.tools.script"]
    line = record.getMessage()
    assert line.startswith("script tools: trusted child process; processes: ")
    assert "memory: RLIMIT_AS/RLIMIT_DATA per process; CPU: RLIMIT_CPU per process" in line
    assert line.endswith(
        "ceilings: 64 processes, 512 MiB memory per process, 30 s CPU per process, "
        "64 MiB /tmp, 60 s wall time, 1048576 bytes output"
    )


def test_without_a_pids_cgroup_the_process_limit_is_rlimit_nproc_or_a_warning() -> None:
    bwrap = ScriptSandbox.for_mode("sandbox").bwrap
    if bwrap is None:
        pytest.skip("bubblewrap is not installed")
    line = ScriptSandbox(mode="sandbox", bwrap=bwrap, cgroup=None).enforcement()
    if os.geteuid() == 0:
        # The kernel exempts root from RLIMIT_NPROC: said, never implied.
        assert "processes: NOT ENFORCED (root is exempt from RLIMIT_NPROC" in line
    else:
        assert "processes: RLIMIT_NPROC in the sandbox's user namespace" in line


@pytest.mark.parametrize(
    "said",
    [
        # Docker's default seccomp profile refuses the user namespace.
        "bwrap: No permissions to create new namespace, likely because the kernel does not "
        "allow non-privileged user namespaces.",
        # A container's masked /proc keeps the sandbox's own from being mounted.
        "bwrap: Can't mount proc on /newroot/proc: Operation not permitted",
    ],
)
def test_a_bwrap_that_cannot_make_the_sandbox_here_is_refused_saying_why(
    tmp_path: Path, said: str
) -> None:
    # Installed, recent enough (it offers --size), and unable to make namespaces:
    # what bubblewrap does in a container with the default security settings.
    (tmp_path / "said").write_text(said + "\n")
    bwrap = tmp_path / "bwrap"
    bwrap.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --help ]; then echo "usage: bwrap --size BYTES"; exit 0; fi\n'
        f"cat {tmp_path / 'said'} >&2\nexit 1\n"
    )
    bwrap.chmod(0o755)
    refusal = ScriptSandbox(mode="sandbox", bwrap=str(bwrap)).refusal()
    assert refusal is not None
    assert said in refusal
    assert "compose.yaml's security_opt" in refusal
    assert ScriptSandbox(mode="sandbox", bwrap=str(bwrap)).enforcement() == (
        "script tools cannot run here"
    )


def test_the_installed_bwrap_makes_the_sandbox_here() -> None:
    sandbox = ScriptSandbox.for_mode("sandbox")
    if sandbox.bwrap is None:
        pytest.skip("bubblewrap is not installed")
    assert sandbox.refusal() is None
