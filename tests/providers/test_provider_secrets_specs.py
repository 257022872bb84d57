"""Secret references and the specs that carry their resolved values."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from pilothouse.catalog._enums import ProviderKind
from pilothouse.errors import SecretNotFoundError
from pilothouse.providers import (
    SECRET_REFERENCE,
    ModelSpec,
    ProviderSpec,
    SecretResolver,
    is_secret_reference,
)


def test_whole_value_reference_resolves_from_environment() -> None:
    resolver = SecretResolver({"OPENAI_API_KEY": "sk-env"})
    assert resolver.resolve("@secrets(OPENAI_API_KEY)") == "sk-env"


def test_embedded_references_resolve_in_place() -> None:
    resolver = SecretResolver({"TOKEN": "abc", "USER": "bob"})
    assert resolver.resolve("Bearer @secrets(TOKEN)") == "Bearer abc"
    assert resolver.resolve("@secrets(USER):@secrets(TOKEN)@host") == "bob:abc@host"


def test_text_without_reference_is_unchanged() -> None:
    assert SecretResolver({}).resolve("https://api.example.com/v1") == "https://api.example.com/v1"


def test_file_is_consulted_after_environment(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.env"
    secrets.write_text(
        "# provider keys\n"
        "\n"
        "ANTHROPIC_KEY=ant-from-file\n"
        "export QUOTED='with spaces = and equals'\n"
        "SHARED=from-file\n",
        encoding="utf-8",
    )
    resolver = SecretResolver({"SHARED": "from-env"}, secrets)
    assert resolver.resolve("@secrets(ANTHROPIC_KEY)") == "ant-from-file"
    assert resolver.resolve("@secrets(QUOTED)") == "with spaces = and equals"
    assert resolver.resolve("@secrets(SHARED)") == "from-env"


def test_missing_secret_names_the_secret_and_not_other_values(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.env"
    secrets.write_text("OTHER=super-secret-value\n", encoding="utf-8")
    resolver = SecretResolver({"ALSO": "env-secret"}, secrets)
    with pytest.raises(SecretNotFoundError) as info:
        resolver.resolve("Bearer @secrets(MISSING_TOKEN)")
    message = str(info.value)
    assert "MISSING_TOKEN" in message
    assert "super-secret-value" not in message and "env-secret" not in message


def test_missing_secrets_file_behaves_as_empty(tmp_path: Path) -> None:
    resolver = SecretResolver({}, tmp_path / "absent.env")
    with pytest.raises(SecretNotFoundError, match="KEY"):
        resolver.resolve("@secrets(KEY)")


def test_is_secret_reference_and_shared_pattern() -> None:
    assert is_secret_reference("@secrets(A)")
    assert is_secret_reference("Bearer @secrets(TOKEN_1)")
    assert not is_secret_reference("plain-value")
    assert not is_secret_reference("@secrets()")
    assert [m.group(1) for m in SECRET_REFERENCE.finditer("@secrets(A) @secrets(B.c)")] == [
        "A",
        "B.c",
    ]


def provider(**overrides: object) -> ProviderSpec:
    fields: dict[str, object] = {
        "code": "OAI",
        "kind": ProviderKind.OPENAI,
        "api_key": "sk-live-abcdef123456",
        "headers": {"Authorization": "Bearer tok-999", "X-Team": "blue-team-secret"},
        "settings": {"session_token": "aws-session-xyz"},
    }
    fields.update(overrides)
    return ProviderSpec(**fields)  # type: ignore[arg-type]


def test_provider_repr_never_shows_key_header_values_or_settings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spec = provider()
    logging.getLogger("test").warning("spec: %r / %s", spec, spec)
    for secret in ("sk-live-abcdef123456", "tok-999", "blue-team-secret", "aws-session-xyz"):
        assert secret not in repr(spec)
        assert secret not in caplog.text
    assert "OAI" in repr(spec)
    assert "api_key=<set>" in repr(spec)
    assert "X-Team" in repr(spec)  # names are fine, values are not


def test_model_spec_repr_hides_provider_secrets() -> None:
    model = ModelSpec(code="GPT", provider=provider(), model_name="gpt-4o-mini")
    assert "sk-live-abcdef123456" not in repr(model)
    assert "gpt-4o-mini" in repr(model)


def test_fingerprint_changes_with_any_field_and_is_stable() -> None:
    base = provider()
    assert base.fingerprint() == provider().fingerprint()
    assert base.fingerprint() != provider(api_key="sk-other").fingerprint()
    assert base.fingerprint() != provider(settings={"api": "responses"}).fingerprint()
    model = ModelSpec(code="M", provider=base, model_name="a")
    assert model.fingerprint() != ModelSpec(code="M", provider=base, model_name="b").fingerprint()


def test_specs_compare_by_value_and_are_hashable() -> None:
    first = ModelSpec(code="M", provider=provider(), model_name="a")
    second = ModelSpec(code="M", provider=provider(), model_name="a")
    assert first == second
    assert {first: "cached"}[second] == "cached"
    assert first != ModelSpec(code="M", provider=provider(api_key="sk-2"), model_name="a")
