"""The small catalog the runtime tests run against, built with the ORM."""

from __future__ import annotations

from decimal import Decimal

from pilothouse.catalog._enums import (
    Cardinality,
    MemoryKind,
    ModelCapability,
    ProviderKind,
    SchemaDirection,
)
from pilothouse.catalog._models import (
    Action,
    ActionSchema,
    ActionSkill,
    ActionType,
    Agent,
    Application,
    Configuration,
    MemoryStrategy,
    Model,
    Persona,
    Provider,
    Skill,
)
from pilothouse.store import Database

COMPETITOR = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "website": {"type": "string"},
        "reason": {"type": "string"},
    },
    "required": ["name"],
}


async def seed_catalog(db: Database, *, capabilities: list[str] | None = None) -> None:
    async with db.sessions.begin() as session:
        provider = Provider(code="TEST", kind=ProviderKind.TEST)
        model = Model(
            code="SCRIPTED",
            provider=provider,
            model_name="scripted",
            capabilities=capabilities
            if capabilities is not None
            else [ModelCapability.FUNCTION_CALLING.value, ModelCapability.STREAMING.value],
            input_price=Decimal("1.0"),
            output_price=Decimal("2.0"),
        )
        config = Configuration(
            code="DEFAULT", max_tokens=128, temperature=0.2, retry_count=2, retry_delay=0.01
        )
        window = MemoryStrategy(code="WINDOW3", kind=MemoryKind.WINDOW, window_size=3)
        persona = Persona(code="EDITOR", prompt="You are a concise editor.")
        skill = Skill(code="VOICE", name="Brand voice", prompt="Keep the brand's voice.")
        summ = ActionType(code="SUMM", constraint_prompt="Answer in at most two sentences.")
        application = Application(code="BRANDS", system_prompt="You work for Brand intelligence.")
        summarize = Action(
            code="SUMBRAND",
            type=summ,
            model=model,
            configuration=config,
            persona=persona,
            memory_strategy=window,
            prompt="Summarize the brand document the user sends.",
            skills=[ActionSkill(skill=skill)],
        )
        templated = Action(
            code="TEMPLATED",
            model=model,
            configuration=config,
            prompt="Write about {topic} for {audience}.",
        )
        extract = Action(
            code="COMPETITORS",
            model=model,
            configuration=config,
            prompt="List the competitors named in the text.",
            schemas=[
                ActionSchema(
                    direction=SchemaDirection.OUTPUT,
                    cardinality=Cardinality.LIST,
                    json_schema=COMPETITOR,
                )
            ],
        )
        agent = Agent(code="ANALYST", application=application, prompt="You analyse brands.")
        session.add_all([summarize, templated, extract, agent])
