"""A small catalog built with the ORM, and a runner wired to the scripted model.

Each runner is the tenant ``default``'s view over a runtime of its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from runtime_catalog import seed_catalog

from pilothouse.providers import ModelFactory, SecretResolver
from pilothouse.runtime import ActionCompiler, EventHub, Runner, Runtime
from pilothouse.store import Database
from pilothouse.testing import ScriptedModel


@pytest.fixture
async def catalog(database: Database) -> Database:
    await seed_catalog(database)
    return database


RunnerFactory = Callable[..., Runner]


@pytest.fixture
async def make_runner(catalog: Database) -> AsyncIterator[RunnerFactory]:
    factories: list[ModelFactory] = []

    def build(model: ScriptedModel, **kwargs: Any) -> Runner:
        factory = ModelFactory()
        factories.append(factory)

        async def no_sleep(_: float) -> None:
            return None

        kwargs.setdefault("sleep", no_sleep)
        runtime = Runtime(
            database=catalog,
            models=factory,
            compiler=ActionCompiler(catalog, SecretResolver(env={}, secrets_file=None)),
            hub=EventHub(),
            model_override=model,
            **kwargs,
        )
        return runtime.runner("default")

    yield build
    for factory in factories:
        await factory.aclose()
