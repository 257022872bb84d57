"""Property-based run of schemathesis against the generated OpenAPI document.

Every operation of the app gets a few generated requests with a valid admin
key; each response must be no 5xx and conform to the documented status
codes, media types and schemas. Bounded: a handful of examples per
operation, well under a minute in all.

schemathesis' own pytest plugin does not run on pytest 9 yet (it reads a
removed ``Function._nodeid``), so the operations are driven from its Python
API with a plain Hypothesis ``@given`` per operation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.errors import InvalidSchema
from schemathesis.core.result import Err, Ok
from schemathesis.schemas import APIOperation
from server_helpers import auth
from starlette.testclient import TestClient

from pilothouse.api import Pilothouse
from pilothouse.server._app import create_app
from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.settings import Settings
from pilothouse.testing import Reply, ScriptedModel

# The response-side checks. Left out: "positive data acceptance", because a
# catalog entity's body is documented as any object (one route serves every
# kind) while each kind's rules are stricter; its 422s are the point.
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


SERVICE_PATHS = ("/healthz", "/readyz", "/metrics", "/v1/catalog", "/v1/conversations")


def _unwrap(result: Ok[APIOperation] | Err[InvalidSchema]) -> APIOperation:
    if isinstance(result, Err):
        raise result.err()
    return result.ok()


def is_service(path: str) -> bool:
    return path.startswith(SERVICE_PATHS)


@pytest.mark.parametrize(
    "group",
    [
        "service",
        "protocols",
    ],
)
def test_openapi_conformance(tmp_path: Path, server_settings: Settings, group: str) -> None:
    url = server_settings.database_url

    async def make_key() -> str:
        async with Pilothouse(Settings(database_url=url)) as ph:
            key, _ = await ph.keys.create(name="schemathesis", admin=True)
            return key

    headers = auth(anyio.run(make_key))
    state = ServerState(
        Settings(database_url=url, secrets_file=None),
        model=ScriptedModel([Reply("ok")] * 2000),
        server=ServerSettings(rate_limit_per_minute=0, shutdown_grace_seconds=0.5),
    )
    app = create_app(state.settings, state=state)
    failures: list[str] = []
    # One client (one event loop, lifespan running) for every call, so the
    # database connections stay in the loop that opened them.
    with TestClient(app, raise_server_exceptions=False) as client:
        schema = schemathesis.openapi.from_dict(client.get("/openapi.json").json())
        # An operation whose schema is invalid is an error of ours: unwrap
        # raises it rather than skipping it.
        operations = [
            op
            for op in (_unwrap(result) for result in schema.get_all_operations())
            if is_service(op.path) == (group == "service")
        ]
        assert operations
        for operation in operations:

            @given(case=operation.as_strategy())
            @settings(
                max_examples=8,
                deadline=None,
                database=None,
                derandomize=True,
                suppress_health_check=[
                    HealthCheck.too_slow,
                    HealthCheck.filter_too_much,
                    HealthCheck.data_too_large,
                    HealthCheck.large_base_example,
                    HealthCheck.function_scoped_fixture,
                ],
            )
            def check(case: Any) -> None:
                kwargs = case.as_transport_kwargs(base_url="http://testserver", headers=headers)
                body = kwargs.pop("data", None)
                if isinstance(body, str | bytes):
                    kwargs["content"] = body
                elif body is not None:
                    kwargs["data"] = body
                kwargs.pop("files", None)
                kwargs.pop("cookies", None)
                response = client.request(**kwargs)
                assert response.status_code < 500, f"{case.method} {case.path}: {response.text}"
                case.validate_response(response, checks=CHECKS)

            try:
                check()
            except (Exception, BaseExceptionGroup) as exc:  # collect all, report together
                failures.append(f"{operation.label}: {exc!r}"[:3000])
    if failures:
        pytest.fail("\n\n".join(failures))
