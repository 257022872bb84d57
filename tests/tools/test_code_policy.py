"""The one resolver of code references: what a grant covers, and what it never does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pilothouse.errors import InvalidFieldError
from pilothouse.providers import SecretResolver
from pilothouse.providers._egress import EgressPolicy
from pilothouse.settings import Settings
from pilothouse.tools._base import ToolError
from pilothouse.tools._code import CodeNotGrantedError, CodePolicy, catalog_code_refusals
from pilothouse.tools._gateway import GatewayProxy

PACKAGE = "code_policy_pkg"


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root: Path = tmp_path_factory.mktemp("code")
    folder = root / PACKAGE
    folder.mkdir()
    (folder / "__init__.py").write_text(
        "import os\n"
        "from shutil import rmtree\n\n"
        "def lookup():\n    return 'looked up'\n\n"
        "def _hidden():\n    return 'hidden'\n\n"
        "class Tools:\n    def ping(self):\n        return 'pong'\n"
    )
    (folder / "sub.py").write_text("def deeper():\n    return 'deeper'\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(root))
        yield PACKAGE


def test_an_open_policy_resolves_any_name() -> None:
    import linecache

    assert CodePolicy.open().resolve("linecache:getlines") is linecache.getlines


@pytest.mark.parametrize(
    "reference",
    ["linecache:getlines", "shutil:rmtree", "posixpath:join", "subprocess:Popen", "os"],
)
def test_an_empty_grant_refuses_every_name_naming_the_setting(reference: str) -> None:
    with pytest.raises(CodeNotGrantedError) as caught:
        CodePolicy.granted([]).resolve(reference)

    message = str(caught.value)
    assert "PILOTHOUSE_CATALOG_CODE, which is empty" in message
    assert "docs/security.md" in message


def test_a_module_grant_covers_what_the_module_tree_defines(package: str) -> None:
    policy = CodePolicy.granted([package])

    assert callable(policy.resolve(f"{package}:lookup"))
    assert callable(policy.resolve(f"{package}.sub:deeper"))
    assert callable(policy.resolve(f"{package}:Tools.ping"))


@pytest.mark.parametrize(
    ("attribute", "reason"),
    [
        ("os.system", "reaches the module 'os'"),
        ("os", "reaches the module 'os'"),
        ("rmtree", "is defined in 'shutil', outside the granted module"),
        ("_hidden", "has not granted"),
    ],
)
def test_a_module_grant_never_covers_what_the_module_imports_nor_private_names(
    package: str, attribute: str, reason: str
) -> None:
    with pytest.raises(CodeNotGrantedError, match=reason) as caught:
        CodePolicy.granted([package]).resolve(f"{package}:{attribute}")

    assert "PILOTHOUSE_CATALOG_CODE" in str(caught.value)


def test_a_callable_grant_covers_that_name_only(package: str) -> None:
    policy = CodePolicy.granted([f"{package}:lookup"])

    assert callable(policy.resolve(f"{package}:lookup"))
    with pytest.raises(CodeNotGrantedError):
        policy.resolve(f"{package}.sub:deeper")
    with pytest.raises(CodeNotGrantedError):
        policy.resolve(f"{package}:Tools")


def test_a_class_grant_in_dotted_form_covers_that_class(package: str) -> None:
    # toolClasses' form: PILOTHOUSE_INVOKE_TOOL_CLASSES=code_policy_pkg.Tools
    policy = CodePolicy.granted([f"{package}.Tools"], setting="PILOTHOUSE_INVOKE_TOOL_CLASSES")

    assert isinstance(policy.resolve(f"{package}:Tools"), type)
    with pytest.raises(CodeNotGrantedError, match="PILOTHOUSE_INVOKE_TOOL_CLASSES"):
        policy.resolve(f"{package}:lookup")


def test_a_granted_name_that_cannot_be_imported_is_a_tool_error() -> None:
    with pytest.raises(ToolError, match="cannot import 'no_such_module_xyz'") as caught:
        CodePolicy.granted(["no_such_module_xyz"]).resolve("no_such_module_xyz:f")

    assert not isinstance(caught.value, CodeNotGrantedError)


def test_the_write_check_names_each_field_that_names_code() -> None:
    policy = CodePolicy.granted([])
    tool = {
        "kind": "python",
        "implementation": "linecache:getlines",
        "settings": {"gateway": {"token_exchange": "posixpath:join"}},
    }

    found = catalog_code_refusals("tools", tool, policy)
    advisor = catalog_code_refusals("advisors", {"implementation": "shutil:rmtree"}, policy)

    assert [location for location, _ in found] == [
        ("implementation",),
        ("settings", "gateway", "token_exchange"),
    ]
    assert [location for location, _ in advisor] == [("implementation",)]
    registered = {"kind": "python", "implementation": "lookup_order"}
    assert catalog_code_refusals("tools", registered, policy) == []
    builtin = {"implementation": "pilothouse.advisors:LoggingAdvisor"}
    assert catalog_code_refusals("advisors", builtin, policy) == []
    assert catalog_code_refusals("advisors", {"implementation": "cache"}, policy) == []
    assert catalog_code_refusals("tools", tool, CodePolicy.open()) == []


def test_the_setting_takes_modules_and_callables_and_refuses_anything_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings(database_url="sqlite+aiosqlite://").catalog_code == []
    monkeypatch.setenv("PILOTHOUSE_CATALOG_CODE", "acme.tools, acme.auth:exchange")
    assert Settings().catalog_code == ["acme.tools", "acme.auth:exchange"]
    monkeypatch.setenv("PILOTHOUSE_CATALOG_CODE", "acme tools")
    with pytest.raises(ValueError, match="entry 'acme tools' is neither a module"):
        Settings()


@pytest.mark.anyio
async def test_a_gateway_naming_ungranted_code_is_refused_before_its_document_is_read() -> None:
    proxy = GatewayProxy(
        SecretResolver(env={}, secrets_file=None),
        EgressPolicy.parse([]),
        code=CodePolicy.granted([]),
    )
    document = {
        # Never fetched: the hook is refused first.
        "implementation": "openapi:https://crm.example.com/openapi.json",
        "settings": {"gateway": {"token_exchange": "posixpath:join"}},
    }
    try:
        with pytest.raises(InvalidFieldError) as caught:
            await proxy.operations("default", "CRM", 1, document)
    finally:
        await proxy.aclose()

    assert caught.value.field == "tool 'CRM': settings.gateway.token_exchange"
    assert "PILOTHOUSE_CATALOG_CODE" in caught.value.rule


def test_json_rpc_routes_name_no_code() -> None:
    from pilothouse.server import RpcRouter

    with pytest.raises(InvalidFieldError, match="is not 'action:<CODE>' or 'agent:<CODE>'"):
        RpcRouter().add_action("erp-1/files/read/1.0.0", "linecache:getlines")
