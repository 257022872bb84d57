"""The small catalog the runtime tests run against, built with the ORM."""

from __future__ import annotations

from decimal import Decimal

from pilothouse.catalog._enums import (
    Cardinality,
    ExecutionPolicy,
    MemoryKind,
    ModelCapability,
    ProviderKind,
    SchemaDirection,
    ToolKind,
)
from pilothouse.catalog._models import (
    Action,
    ActionAdvisor,
    ActionSchema,
    ActionSkill,
    ActionTool,
    ActionType,
    Advisor,
    Agent,
    Application,
    Configuration,
    MemoryStrategy,
    Model,
    Persona,
    Provider,
    Skill,
    SkillDependency,
    SkillTool,
    Tool,
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
            code="SCRP",
            provider=provider,
            model_name="scripted",
            capabilities=capabilities
            if capabilities is not None
            else [ModelCapability.FUNCTION_CALLING.value, ModelCapability.STREAMING.value],
            input_price=Decimal("1.0"),
            output_price=Decimal("2.0"),
        )
        config = Configuration(
            code="DFLT", max_tokens=128, temperature=0.2, retry_count=2, retry_delay=0.01
        )
        window = MemoryStrategy(code="WIN3", kind=MemoryKind.WINDOW, window_size=3)
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
        approve = Tool(
            code="APPROVE",
            name="approve_small",
            kind=ToolKind.PYTHON,
            implementation="runtime_catalog:approve_small",
            description="Allows transfers under 100.",
        )
        session.add_all(
            [
                summarize,
                templated,
                extract,
                agent,
                approve,
                *_tool_actions(model, config),
                *_advised_actions(model, config),
            ]
        )


def _advised_actions(model: Model, config: Configuration) -> list[Action]:
    """Actions behind a content filter (FILTERED) and a response cache (CACHED)."""
    guard = Advisor(
        code="GUARD",
        implementation="content-filter",
        default_order=100,
        settings={"blocked_terms": ["project falcon"]},
    )
    cache = Advisor(code="CACHE", implementation="cache", settings={"backend": "memory"})
    return [
        Action(
            code="FILTERED",
            model=model,
            configuration=config,
            prompt="Answer briefly.",
            ask_user=False,
            advisors=[ActionAdvisor(advisor=guard)],
        ),
        Action(
            code="CACHED",
            model=model,
            configuration=config,
            prompt="Answer briefly.",
            ask_user=False,
            advisors=[ActionAdvisor(advisor=cache, order=10)],
        ),
    ]


def approve_small(tool: str, arguments: dict[str, object]) -> str:
    """Decide a tool call: transfers under 100 are allowed.

    Args:
        tool: the tool the model wants to call.
        arguments: its arguments.
    """
    amount = arguments.get("amount", 0)
    allowed = tool != "transfer_money" or (isinstance(amount, int | float) and amount < 100)
    return "allow" if allowed else "deny"


CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TRANSFER = {
    "type": "object",
    "properties": {"account": {"type": "string"}, "amount": {"type": "number"}},
    "required": ["account", "amount"],
}
INVOICE = {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]}


def _tool_actions(model: Model, config: Configuration) -> list[Action]:
    """Actions with tools: direct tools (WEATHER), and skills with tools (SKILLED)."""

    def tool(code: str, name: str, schema: dict[str, object], **kw: object) -> Tool:
        return Tool(
            code=code,
            name=name,
            kind=kw.pop("kind", ToolKind.PYTHON),
            implementation="tests:fake",
            description=f"{name} tool",
            input_schema=schema,
            **kw,
        )

    weather = tool("WEATHER", "get_weather", CITY)
    slow = tool("SLOW", "slow_lookup", CITY, settings={"timeout": 0.2})
    transfer = tool("TRANSFER", "transfer_money", TRANSFER, policy=ExecutionPolicy.AUTHORIZED)
    invoice = tool("INVOICE", "extract_invoice", INVOICE, kind=ToolKind.SCHEMA)
    boom = tool("BOOM", "explode", CITY)
    base = Skill(
        code="GEO",
        name="Geography",
        description="Knows places",
        prompt="Use maps.",
        tools=[SkillTool(tool=tool("MAP", "find_city", CITY))],
    )
    skilled = Skill(
        code="TRAVEL",
        name="Travel",
        description="Plans trips",
        prompt="Plan the trip step by step.",
        tools=[SkillTool(tool=tool("FLIGHT", "book_flight", CITY))],
        dependencies=[SkillDependency(depends_on=base)],
    )
    return [
        Action(
            code="TOOLS",
            model=model,
            configuration=config,
            prompt="Use your tools.",
            tools=[
                ActionTool(tool=t, position=i)
                for i, t in enumerate([weather, slow, transfer, invoice, boom])
            ],
        ),
        Action(
            code="SKILLED",
            model=model,
            configuration=config,
            prompt="Help with travel.",
            skills=[ActionSkill(skill=skilled)],
            progressive_disclosure=True,
        ),
    ]
