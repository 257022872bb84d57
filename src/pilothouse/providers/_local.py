"""The embedded local model: llama.cpp servers for GGUF files on loopback.

pilothouse runs without any vendor account by serving a small GGUF model that
PyPI packages ship (Qwen2.5-Coder-0.5B-Instruct by default, SmolLM2-135M as the
small fallback, see :mod:`._local_models`) with llama-cpp-python's
OpenAI-compatible server, adjusted by :mod:`._llama_server` (pilothouse's own
chat handler for tool calls, ``max_completion_tokens`` honoured). The rest of
the platform talks to it like to any OpenAI-compatible provider, through
``base_url``.

:class:`LocalModelServers` owns those server processes: it starts one per
(model file, chat format, context size, threads) on a free loopback port,
waits until it answers, hands out its ``/v1`` URL, reuses it for every later
caller, restarts it if it died, and stops it on close or at interpreter exit.
"""

from __future__ import annotations

__all__ = [
    "BUILTIN_MODELS",
    "DEFAULT_CHAT_FORMAT",
    "LocalModelServers",
    "LocalServer",
    "choose_threads",
    "default_model_path",
]

import asyncio
import atexit
import contextlib
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
from typing import IO

import httpx

from pilothouse.errors import ProviderConnectionError
from pilothouse.providers._errors import MissingExtraError, ProviderConfigError
from pilothouse.providers._local_models import (
    BUILTIN_MODELS,
    DEFAULT_MODEL,
    default_model_path,
    installed_models,
    names_served_model,
    resolve_model_path,
    served_model_id,
)

#: The chat format servers use unless a provider names another: pilothouse's
#: own handler (the model's chat template, its native tool-call syntax).
DEFAULT_CHAT_FORMAT = "pilothouse"

_INSTALL_HINT = "the local model needs `pip install 'pilothouse[local]'`"
# The packages `llama-cpp-python[server]` brings; a missing one makes the server
# die at import, which is better reported before starting a process at all.
_SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context")
_LOG_TAIL_CHARS = 2000
_POLL_INTERVAL = 0.1
_STOP_GRACE = 5.0

# The server is started through this bootstrap rather than bare ``-m`` so that it
# exits on its own when its parent dies without running atexit (SIGKILL, a
# crash): the parent holds the write end of the child's stdin, and the kernel
# closes it whatever way the parent ends, so the watcher reads EOF and exits.
# llama_cpp is imported first so that an interpreter without it says so.
_BOOTSTRAP = """\
import os, runpy, sys, threading
def _exit_with_parent():
    sys.stdin.buffer.read()
    os._exit(0)
threading.Thread(target=_exit_with_parent, daemon=True).start()
import llama_cpp, uvicorn
sys.argv[0] = "pilothouse.providers._llama_server"
runpy.run_module("pilothouse.providers._llama_server", run_name="__main__", alter_sys=True)
"""


def choose_threads(cores: int | None = None, busy: float | None = None) -> int:
    """Pick llama.cpp's thread count from the cores that are actually free.

    A llama.cpp thread that has to share its core with another busy process
    stalls every other thread at each synchronisation point: on 2 cores, 2
    threads were 5-10x slower than 1 whenever the other core was busy, while
    1 thread lost little on an idle machine (figures in docs/local-model.md).
    So the rule is: one thread per core that is idle now, keeping one core
    for everything else (the run loop, the database, the other requests),
    and never fewer than one.

    Args:
        cores: the cores this process may use (default: its CPU affinity).
        busy: how many cores' worth of work is running now (default: the
            1-minute load average).

    Returns:
        The thread count, at least 1.
    """
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        cores = cores or 1
    if busy is None:
        busy = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    free = int(cores - busy)
    return max(1, min(cores - 1, free))


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
        n_threads: the llama.cpp threads it runs with.
        base_url: the OpenAI-compatible base URL, ``http://127.0.0.1:PORT/v1``.
        pid: the server's process id.
        log_path: the file its stdout and stderr go to.
    """

    model_path: str
    chat_format: str
    n_ctx: int
    n_threads: int
    base_url: str
    pid: int
    log_path: str


# What a caller asks for: (model path or built-in name, chat format, n_ctx,
# n_threads or None for "choose"). Keyed on the request, not the resolved file,
# so a running server is found without checking the model file again.
_Key = tuple[str, str, int, int | None]


@dataclass(frozen=True)
class _Spec:
    model_path: str
    chat_format: str
    n_ctx: int
    n_threads: int


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

    One server runs per (model, chat format, context size, threads); concurrent
    first callers in one event loop wait for the same start. Servers are stopped
    by :meth:`aclose` / :meth:`close`, and at interpreter exit in any case.

    Example:
        ```python
        servers = LocalModelServers()
        base_url = await servers.base_url()  # Qwen2.5-Coder-0.5B-Instruct
        ...  # any OpenAI-compatible client with base_url and a dummy api_key
        await servers.aclose()
        ```
    """

    def __init__(
        self,
        *,
        startup_timeout: float = 120.0,
        python: str | None = None,
        default_model: str = DEFAULT_MODEL,
        cache_dir: Path | None = None,
    ) -> None:
        """Prepare, without starting anything.

        Args:
            startup_timeout: seconds a server may take to answer ``GET /v1/models``.
            python: the interpreter that runs the server (it needs
                ``llama-cpp-python[server]`` and pilothouse); defaults to this one.
            default_model: the model served when a caller names none: a name
                from :data:`BUILTIN_MODELS` or a ``.gguf`` path.
            cache_dir: where chunked built-in models are assembled (default
                ``$XDG_CACHE_HOME/pilothouse/models``).
        """
        self._startup_timeout = startup_timeout
        self._python = python or sys.executable
        self._default_model = default_model
        self._cache_dir = cache_dir
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
        chat_format: str = DEFAULT_CHAT_FORMAT,
        n_ctx: int = 4096,
        n_threads: int | None = None,
    ) -> str:
        """Return the base URL of a running server for this model, starting one if needed.

        Args:
            model_path: a ``.gguf`` file, a name from :data:`BUILTIN_MODELS`, or
                ``None`` for the default model (Qwen2.5-Coder-0.5B-Instruct
                unless the constructor said otherwise).
            chat_format: ``pilothouse`` (the model's own chat template, with
                tool calls in its native syntax), or any llama-cpp-python
                chat format.
            n_ctx: the context size in tokens.
            n_threads: llama.cpp threads; ``None`` chooses them from the cores
                free when the server starts (:func:`choose_threads`).

        Returns:
            ``http://127.0.0.1:PORT/v1``.

        Raises:
            MissingExtraError: llama-cpp-python[server] is not installed.
            ProviderConfigError: the model's package is not installed, the
                model file does not exist, or a built-in model fails its
                size and SHA-256 check (retrying cannot help either).
            ProviderConnectionError: the server did not start or did not become
                ready within the startup timeout; the message has its log tail.
        """
        if n_threads is not None and n_threads < 1:
            raise ProviderConfigError(f"n_threads must be at least 1 (got {n_threads})")
        key: _Key = (model_path or self._default_model, chat_format, n_ctx, n_threads)
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

    def check_model_name(self, model_name: str, *, model_path: str | None = None) -> str:
        """Refuse a catalog ``model_name`` that the served model file is not.

        A local provider serves one file (its ``model_path``, else this
        manager's default model) whatever name a request gives; a catalog
        model naming another would be recorded as a model that never ran.

        Args:
            model_name: the catalog model's ``model_name``.
            model_path: the provider's ``settings.model_path``, if any.

        Returns:
            The id of the served model (what its answers name).

        Raises:
            ProviderConfigError: ``model_name`` does not name the served file;
                the message names it and the installed models.
        """
        served = served_model_id(model_path, default=self._default_model)
        if names_served_model(model_name, served):
            return served
        installed = ", ".join(installed_models()) or "none"
        source = (
            f"settings.model_path {model_path!r}"
            if model_path
            else f"no settings.model_path, so the default {self._default_model!r}"
        )
        raise ProviderConfigError(
            f"model_name {model_name!r} is not the local model this provider serves: it "
            f"has {source}, the file {served!r}. Installed local models: {installed}. "
            "Set the provider's settings.model_path to the model you mean, or model_name "
            f"to {served!r}"
        )

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
        requested, chat_format, n_ctx, n_threads = key
        # In a thread: the first use of a chunked model assembles ~500 MB, and
        # every start checks its SHA-256 before the server may load it.
        model_path = await asyncio.to_thread(
            resolve_model_path, requested, cache_dir=self._cache_dir
        )
        spec = _Spec(model_path, chat_format, n_ctx, n_threads or choose_threads())
        if self._owned.log_dir is None:
            self._owned.log_dir = tempfile.mkdtemp(prefix="pilothouse-llama-")
        attempts = 3
        for attempt in range(attempts):
            proc = self._spawn(spec, self._owned.log_dir, _free_loopback_port())
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

    def _spawn(self, spec: _Spec, log_dir: str, port: int) -> _Process:
        log_path = os.path.join(log_dir, f"server-{port}.log")
        args = [
            "--model", spec.model_path,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--chat_format", spec.chat_format,
            "--n_ctx", str(spec.n_ctx),
            "--n_threads", str(spec.n_threads),
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
            model_path=spec.model_path,
            chat_format=spec.chat_format,
            n_ctx=spec.n_ctx,
            n_threads=spec.n_threads,
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
