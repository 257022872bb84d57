"""Dockerfile and compose.yaml: what can be checked without a container engine.

Docker does not run on the test machine; these tests check that the files
parse, wire the health checks, and name only settings the service reads
(a misspelt variable would be silently ignored by the container).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from typer.testing import CliRunner

from pilothouse.cli import app
from pilothouse.server._state import ServerSettings
from pilothouse.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


def _load(text: str) -> Any:
    # ruamel.yaml, the project's own YAML dependency.
    return YAML(typ="safe").load(text)


def _compose() -> dict[str, Any]:
    return _load((ROOT / "compose.yaml").read_text())


def test_compose_starts_pilothouse_postgres_with_pgvector_and_redis_with_health_checks() -> None:
    services = _compose()["services"]
    assert set(services) == {"pilothouse", "postgres", "redis"}
    assert services["postgres"]["image"].startswith("pgvector/pgvector:")
    for name, service in services.items():
        assert "test" in service["healthcheck"], name
    waits = services["pilothouse"]["depends_on"]
    assert {w["condition"] for w in waits.values()} == {"service_healthy"}
    assert "/readyz" in " ".join(services["pilothouse"]["healthcheck"]["test"])


def test_compose_names_only_settings_the_service_reads() -> None:
    environment = _compose()["services"]["pilothouse"]["environment"]
    known = {f"PILOTHOUSE_{name.upper()}" for name in Settings.model_fields} | {
        f"PILOTHOUSE_SERVER_{name.upper()}" for name in ServerSettings.model_fields
    }
    named = {key for key in environment if key.startswith("PILOTHOUSE_")}
    assert named and named <= known, named - known
    # And the values parse as the settings they set.
    Settings(
        **{
            k.removeprefix("PILOTHOUSE_").lower(): v
            for k, v in environment.items()
            if k.removeprefix("PILOTHOUSE_").lower() in Settings.model_fields
        }
    )


def test_the_dockerfile_command_is_a_valid_serve_invocation() -> None:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    command = next(line for line in lines if line.startswith("CMD ["))
    argv: list[str] = _load(command.removeprefix("CMD "))
    assert argv[:2] == ["pilothouse", "serve"]
    # Every option exists: --help of serve lists them.
    usage = CliRunner().invoke(app, ["serve", "--help"]).output
    for option in (a for a in argv if a.startswith("--")):
        assert option in usage, option
    healthcheck = next(line for line in lines if "urlopen" in line)
    assert "/readyz" in shlex.split(healthcheck)[-1]
    assert any(line.startswith("HEALTHCHECK ") for line in lines)


def test_compose_lets_bubblewrap_make_the_script_tool_sandbox() -> None:
    # Docker's seccomp profile refuses user namespaces, its AppArmor profile
    # the mounts, and its masked /proc a new /proc: each one stops bwrap.
    options = set(_compose()["services"]["pilothouse"].get("security_opt", []))
    assert {"seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"} <= options
    # Kubernetes operators find the same in the docs.
    operations = (ROOT / "docs" / "operations.md").read_text()
    for setting in ("seccompProfile:", "appArmorProfile:", "procMount: Unmasked"):
        assert setting in operations, setting
