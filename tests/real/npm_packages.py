"""npm packages the real tests run (MCP server-everything, the MCP Inspector).

Each package gets its own npm prefix under ``tests/real/.node/<name>``. They
once shared one prefix while their two modules ran on different xdist
workers at the same time, so the Inspector's ``npm install`` could rewrite
the shared ``node_modules`` (both depend on ``@modelcontextprotocol/sdk``)
while server-everything started; CI saw server-everything exit with 1 on
every start after some point (inferred as the cause, not reproduced by
hand). A separate prefix per package cannot be touched by the other's
install; the install goes to a temporary directory that is renamed into place
only once it is complete, so a crashed install never looks installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import NoReturn

import pytest

NODE_DIR = Path(__file__).parent / ".node"


class NpmUnavailable(Exception):
    """node or npm is not on PATH: the tests that need them are skipped."""


def skip_without(missing: NpmUnavailable, tests: str) -> NoReturn:
    """Skip ``tests`` for want of node or npm, printing why and what lifts the skip."""
    reason = f"{missing}; install Node.js (node and npm) to run them"
    print(f"skipping {tests}: {reason}")
    pytest.skip(reason)


def node_executable() -> str:
    """The node executable, or NpmUnavailable."""
    node = shutil.which("node")
    if node is None:
        raise NpmUnavailable("node is not on PATH")
    return node


def npm_package(spec: str, entry: str) -> Path:
    """Install ``spec`` (``name@version``) once and return its ``entry`` file.

    Args:
        spec: The npm package and exact version, e.g. ``@scope/name@1.0.3``.
        entry: The file to run, relative to the package's own directory.

    Returns:
        The absolute path of ``entry`` inside the installed package.

    Raises:
        NpmUnavailable: npm is not on PATH.
        RuntimeError: npm failed; its error output is in the message.
    """
    name, _, version = spec.rpartition("@")
    prefix = NODE_DIR / f"{name.replace('/', '+').lstrip('@')}-{version}"
    target = prefix / "node_modules" / name / entry
    if target.is_file():
        return target
    npm = shutil.which("npm")
    if npm is None:
        raise NpmUnavailable("npm is not on PATH")
    NODE_DIR.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    staging = Path(tempfile.mkdtemp(prefix=f".{prefix.name}-", dir=NODE_DIR))
    try:
        done = subprocess.run(
            [npm, "install", "--prefix", str(staging), "--no-audit", "--no-fund", spec],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"npm install {spec} failed: {done.stderr.strip()[-600:]}")
        try:
            os.rename(staging, prefix)
        except OSError:
            # Another process finished the same install first; theirs is complete.
            if not target.is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not target.is_file():
        raise RuntimeError(f"npm installed {spec} but {entry} is not in it")
    print(f"installed {spec} in {time.perf_counter() - started:.1f} s")
    return target
