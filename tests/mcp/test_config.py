"""McpClientConfig: built from a catalog row, secrets resolved, never shown."""

from __future__ import annotations

import pytest

from pilothouse.catalog._enums import McpTransport
from pilothouse.catalog._models import McpClient
from pilothouse.errors import SecretNotFoundError
from pilothouse.mcp import McpClientConfig
from pilothouse.providers import SecretResolver
from pilothouse.tools import ToolError

SECRETS = SecretResolver({"TOKEN": "s3cr3t-token", "DB_PASSWORD": "hunter2"})


def http_row() -> McpClient:
    return McpClient(
        name="crm",
        transport=McpTransport.STREAMABLE_HTTP,
        url="http://127.0.0.1:9/mcp",
        headers={"Authorization": "Bearer @secrets(TOKEN)", "X-Team": "sales"},
        confidential_headers=["Authorization"],
        description="The CRM.",
        args=[],
        env={},
    )


def test_from_row_resolves_header_secrets() -> None:
    config = McpClientConfig.from_row(http_row(), SECRETS)
    assert config.headers == {"Authorization": "Bearer s3cr3t-token", "X-Team": "sales"}
    assert config.confidential_headers == frozenset({"Authorization"})
    assert config.transport is McpTransport.STREAMABLE_HTTP
    assert config.description == "The CRM."


def test_from_row_resolves_env_secrets_for_stdio() -> None:
    row = McpClient(
        name="db",
        transport=McpTransport.STDIO,
        command="python",
        args=["-m", "db_server", "--port", 5],
        env={"PASSWORD": "@secrets(DB_PASSWORD)"},
        headers={},
        confidential_headers=[],
    )
    config = McpClientConfig.from_row(row, SECRETS)
    assert config.env == {"PASSWORD": "hunter2"}
    assert config.args == ("-m", "db_server", "--port", "5")


def test_repr_never_shows_header_or_env_values() -> None:
    config = McpClientConfig.from_row(http_row(), SECRETS)
    stdio = McpClientConfig(
        name="db", transport=McpTransport.STDIO, command="db", env={"PASSWORD": "hunter2"}
    )
    for text in (repr(config), str(config), repr(stdio)):
        assert "s3cr3t" not in text and "hunter2" not in text and "sales" not in text
    assert "headers=[Authorization, X-Team]" in repr(config)
    assert "env=[PASSWORD]" in repr(stdio)


def test_a_missing_secret_is_named() -> None:
    with pytest.raises(SecretNotFoundError, match="'TOKEN'"):
        McpClientConfig.from_row(http_row(), SecretResolver({}))


def test_transport_needs_its_endpoint() -> None:
    with pytest.raises(ToolError, match="transport stdio needs a command"):
        McpClientConfig(name="x", transport=McpTransport.STDIO)
    with pytest.raises(ToolError, match="transport SSE needs a url"):
        McpClientConfig(name="x", transport=McpTransport.SSE)


def test_the_key_changes_with_any_value() -> None:
    base = McpClientConfig.from_row(http_row(), SECRETS)
    same = McpClientConfig.from_row(http_row(), SECRETS)
    rotated = McpClientConfig.from_row(http_row(), SecretResolver({"TOKEN": "new"}))
    assert base == same and hash(base) == hash(same) and base.key == same.key
    assert rotated.key[0] == base.key[0] and rotated.key != base.key
    assert "s3cr3t" not in str(base.key)


def test_the_config_is_read_only() -> None:
    config = McpClientConfig.from_row(http_row(), SECRETS)
    with pytest.raises(TypeError):
        config.headers["X-Team"] = "other"  # type: ignore[index]
