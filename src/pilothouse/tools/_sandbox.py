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
"""

from __future__ import annotations

__all__ = ["SCRIPT_LANGUAGES", "ScriptSandbox", "ScriptToolsMode"]

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

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
    """

    mode: ScriptToolsMode = "sandbox"
    bwrap: str | None = None

    @classmethod
    def for_mode(cls, mode: ScriptToolsMode) -> ScriptSandbox:
        """The runner for ``mode``, with ``bwrap`` looked up on ``PATH``."""
        return cls(mode=mode, bwrap=shutil.which("bwrap") if mode == "sandbox" else None)

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

    def command(self, source: str, home: str, language: str = "python") -> list[str]:
        """The command that runs ``source`` (Python, or JavaScript on Node); ``home`` is its folder.

        In the sandbox ``home`` is not used: the script gets an empty
        ``/tmp`` of its own. Both languages run under the same sandbox.
        """
        node = _node() if language == "javascript" else None
        if language == "javascript" and node is None:
            raise RuntimeError("javascript script tools need 'node' on PATH")
        plain = [node, "-e", source] if node is not None else [sys.executable, "-I", "-c", source]
        if self.mode != "sandbox" or self.bwrap is None:
            return plain
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
        if node is not None and not node.startswith("/usr/"):
            # A Node installed elsewhere: its own folder only, read-only.
            folder = str(Path(node).parent)
            binds += ["--ro-bind", folder, folder]
        program = [node, "-e", source] if node is not None else [interpreter, "-I", "-c", source]
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
            "--tmpfs",
            "/tmp",
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
            *program,
        ]
