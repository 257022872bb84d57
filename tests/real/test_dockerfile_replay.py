"""The Dockerfile's Python steps, replayed without a container engine: the image's install works.

No container engine runs on the test machine, so the image is not built
here; its Python steps are replayed as the Dockerfile writes them:

- the builder stage: its ``COPY`` lines into a fresh folder, its ``ENV``,
  then its ``pip wheel`` line. The one compile there, llama-cpp-python from
  source (about ten minutes), is stood in for by the prebuilt wheel in
  ``../shared/wheels`` (what the builder makes, built the same way with
  ``CMAKE_ARGS=-DGGML_NATIVE=OFF``); every other wheel comes from the package
  index as the builder would fetch it;
- the runtime stage: its ``pip install`` line, as written, in a fresh
  virtual environment, with the builder's wheels where the Dockerfile mounts
  them and ``CC``/``CXX`` set to ``/bin/false``, so a step that needed a
  compiler (a dependency without a wheel) fails here as it would in the slim
  image. Then the installed ``pilothouse`` starts and ``llama_cpp`` loads.

Slow, and marked ``real``: about three minutes with pip's cache warm (the
builder's ``pip wheel`` of ~100 packages about two, the runtime's install
about one); ``tests/conftest.py`` starts such modules first.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[2]
PREBUILT = ROOT.parent / "shared" / "wheels"


def _stages(text: str) -> list[list[tuple[str, str]]]:
    """The Dockerfile's stages, each a list of (instruction, arguments), continuations joined."""
    # As Docker reads it: comment lines go first (also inside a continued
    # instruction), then a line ending in a backslash continues on the next.
    kept = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    joined = re.sub(r"\\\n", " ", kept)
    stages: list[list[tuple[str, str]]] = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, arguments = line.partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        stages[-1].append((instruction.upper(), arguments.strip()))
    return stages


def _env(arguments: str) -> dict[str, str]:
    """An ``ENV`` line's variables (``NAME=value ...``)."""
    return dict(word.split("=", 1) for word in shlex.split(arguments))


def _pip(arguments: str, verb: str) -> list[str]:
    """The ``pip <verb>`` command of a ``RUN`` line, its ``--mount`` options dropped."""
    words = [w for w in shlex.split(arguments) if not w.startswith("--mount=")]
    assert words[:2] == ["pip", verb], f"not a 'pip {verb}' step: {arguments}"
    return words[2:]


def _run(command: list[str], env: dict[str, str], cwd: Path) -> None:
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode == 0, (
        f"{shlex.join(command)[:300]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )


def test_the_runtime_stage_installs_from_the_builder_s_wheels_without_a_compiler(
    tmp_path: Path,
) -> None:
    if not list(PREBUILT.glob("llama_cpp_python-*.whl")):
        pytest.skip(f"no prebuilt llama-cpp-python wheel in {PREBUILT}")
    stages = _stages((ROOT / "Dockerfile").read_text())
    assert len(stages) == 2, "a builder stage and a runtime stage"
    builder, runtime = stages
    assert builder[0][1].endswith(" AS builder"), builder[0]

    # The builder: COPY, ENV and its pip wheel line, as written.
    context = tmp_path / "build"
    context.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_NO")}
    wheels = tmp_path / "wheels"
    built = False
    for instruction, arguments in builder:
        if instruction == "ENV":
            env.update(_env(arguments))
        elif instruction == "COPY":
            *sources, _ = shlex.split(arguments)
            for source in sources:
                if (ROOT / source).is_dir():
                    shutil.copytree(ROOT / source, context / source)
                else:
                    shutil.copy(ROOT / source, context / source)
        elif instruction == "RUN" and "pip wheel" in arguments:
            words = _pip(arguments, "wheel")
            words = [str(wheels) if w == "/wheels" else w for w in words]
            assert str(wheels) in words, "the builder writes its wheels to /wheels"
            # The prebuilt wheel stands in for the compile of llama.cpp.
            extra = ["--find-links", str(PREBUILT), "--only-binary", "llama-cpp-python"]
            _run([sys.executable, "-m", "pip", "wheel", *extra, *words], env, context)
            built = True
    assert built, "the builder stage builds the wheels (pip wheel)"
    names = {p.name.split("-")[0] for p in wheels.glob("*.whl")}
    assert {"pilothouse", "llama_cpp_python"} <= names

    # The runtime: a fresh environment, no compiler, only the builder's wheels.
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], dict(os.environ), tmp_path)
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV", "CMAKE"))
    }
    runtime_env = {
        **clean,
        # This machine's pip configuration adds package folders; the image has none.
        "PIP_CONFIG_FILE": os.devnull,
        # Bytecode changes nothing that is installed; it is a third of pip's time.
        "PIP_NO_COMPILE": "1",
        "CC": "/bin/false",
        "CXX": "/bin/false",
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
    }
    installs = [a for i, a in runtime if i == "RUN" and "pip install" in a]
    assert installs, "the runtime stage installs pilothouse with pip"
    for arguments in installs:
        assert "from=builder" in arguments, "the runtime installs the builder's wheels"
        words = _pip(arguments, "install")
        assert "--no-index" in words, "the runtime stage downloads nothing"
        words = [str(wheels) if w == "/wheels" else w for w in words]
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", *words], runtime_env, tmp_path)
    _run([str(venv / "bin" / "pilothouse"), "--help"], runtime_env, tmp_path)
    _run([str(venv / "bin" / "python"), "-c", "import llama_cpp"], runtime_env, tmp_path)
    command = next(a for i, a in runtime if i == "CMD")
    assert command.startswith('["pilothouse", "serve"')
