"""A deployment's secrets: one scope per tenant, the environment only where the operator maps it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from pilothouse.errors import SecretNotFoundError
from pilothouse.providers import DeploymentSecrets
from pilothouse.settings import Settings

ENVIRON = {
    "PILOTHOUSE_DATABASE_URL": "postgresql://admin:hunter2@db/prod",
    "OPENAI_API_KEY": "sk-env-of-the-server",
    "ACME_OPENAI_KEY": "sk-acme-from-env",
    "SEARCH_KEY": "search-for-everyone",
}


@pytest.fixture
def secrets_file(tmp_path: Path) -> Path:
    path = tmp_path / "secrets.env"
    path.write_text(
        "# before any section: the default tenant's\n"
        "OPENAI_API_KEY=sk-default-from-file\n"
        "[acme]\n"
        "CRM_TOKEN=acme-crm\n"
        "[ beta ]\n"
        "CRM_TOKEN='beta crm'\n"
        "BETA_ONLY=beta-only\n"
        "[*]\n"
        "WEATHER_KEY=weather-for-everyone\n",
        encoding="utf-8",
    )
    return path


def test_each_tenant_resolves_its_own_section_and_the_shared_one_only(secrets_file: Path) -> None:
    secrets = DeploymentSecrets(ENVIRON, secrets_file, default_tenant="default")

    acme, beta = secrets.for_tenant("acme"), secrets.for_tenant("beta")

    assert acme.resolve("Bearer @secrets(CRM_TOKEN)") == "Bearer acme-crm"
    assert beta.resolve("@secrets(CRM_TOKEN)") == "beta crm"
    assert acme.resolve("@secrets(WEATHER_KEY)") == beta.lookup("WEATHER_KEY")
    assert secrets.for_tenant("default").lookup("OPENAI_API_KEY") == "sk-default-from-file"
    with pytest.raises(
        SecretNotFoundError, match="'BETA_ONLY' is not defined in the secrets of tenant 'acme'"
    ):
        acme.resolve("@secrets(BETA_ONLY)")
    # The default tenant's lines are not another tenant's.
    assert not acme.defines("OPENAI_API_KEY")


@pytest.mark.parametrize("name", ["PILOTHOUSE_DATABASE_URL", "OPENAI_API_KEY", "SEARCH_KEY"])
def test_the_environment_is_no_tenants_secret_unless_mapped(name: str) -> None:
    secrets = DeploymentSecrets(ENVIRON, None)

    for tenant in ("default", "acme"):
        with pytest.raises(SecretNotFoundError) as refused:
            secrets.for_tenant(tenant).resolve(f"@secrets({name})")
        assert ENVIRON[name] not in str(refused.value)
        assert "PILOTHOUSE_SECRETS_ENV" in str(refused.value)


def test_the_operators_mapping_gives_a_tenant_exactly_the_variables_named(
    secrets_file: Path,
) -> None:
    secrets = DeploymentSecrets(
        ENVIRON,
        secrets_file,
        {"acme": ["OPENAI_API_KEY=ACME_OPENAI_KEY"], "*": ["SEARCH_KEY"]},
    )

    acme, beta = secrets.for_tenant("acme"), secrets.for_tenant("beta")

    assert acme.lookup("OPENAI_API_KEY") == "sk-acme-from-env"
    assert acme.lookup("SEARCH_KEY") == beta.lookup("SEARCH_KEY") == "search-for-everyone"
    assert not beta.defines("OPENAI_API_KEY")
    assert not acme.defines("ACME_OPENAI_KEY")  # the variable, not a secret name of acme's
    assert not acme.defines("PILOTHOUSE_DATABASE_URL")


def test_a_tenants_own_value_wins_over_the_shared_one(tmp_path: Path) -> None:
    path = tmp_path / "secrets.env"
    path.write_text("[*]\nKEY=shared\n[acme]\nKEY=acme's\n", encoding="utf-8")

    secrets = DeploymentSecrets({}, path)

    assert secrets.for_tenant("acme").lookup("KEY") == "acme's"
    assert secrets.for_tenant("beta").lookup("KEY") == "shared"


def test_secrets_env_reads_json_and_refuses_a_bad_entry_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PILOTHOUSE_SECRETS_ENV", '{"acme": ["KEY=ACME_KEY"], "*": ["SHARED"]}')
    assert Settings().secrets_env == {"acme": ["KEY=ACME_KEY"], "*": ["SHARED"]}

    with pytest.raises(
        ValidationError, match="secrets_env entry 'KEY=not a variable' of tenant 'acme'"
    ):
        Settings(secrets_env={"acme": ["KEY=not a variable"]})
