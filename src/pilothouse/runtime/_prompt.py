"""System prompt assembly.

Every part of the system prompt comes from a :class:`PromptContributor`; the
built-ins follow the documented order (``docs/runtime.md``, "Assembly order":
application, agent, persona, skills, MCP clients, schema block, action-type
constraint, action prompt) and other modules add their own by implementing
the same protocol. Assembly happens once per compiled action; a turn only
fills in ``{placeholders}``.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_INSTRUCTION",
    "PromptContext",
    "PromptContributor",
    "TemplateError",
    "apply_instruction",
    "assemble",
    "default_contributors",
    "fill_template",
    "output_json_schema",
    "skill_sentence",
    "template_fields",
]

import json
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pilothouse.catalog._enums import Cardinality, InstructionMode, SchemaDirection
from pilothouse.catalog._views import ActionRecord, AgentRecord, McpClientRecord, SkillRecord
from pilothouse.errors import PilothouseError

DEFAULT_INSTRUCTION = (
    "You are an assistant working inside a business application. Answer accurately and "
    "concisely, use only the information you were given or can obtain with your tools, and "
    "say so when you do not know."
)
"""The bundled default instruction that callers may replace, append to or prepend to."""


@dataclass(frozen=True)
class PromptContext:
    """What the contributors read: one action and agent as the compile read them.

    A compile fills it with read-only views of the catalog rows
    (``ActionView``, ``AgentView``, ...), read with Core statements so that a
    turn never loads the ORM; they have the mapped classes' column and
    relationship names, so a context built by hand from mapped rows (a
    contributor's own test) reads the same.
    """

    action: ActionRecord
    agent: AgentRecord | None
    skills: Sequence[SkillRecord] = ()
    mcp_clients: Sequence[McpClientRecord] = ()
    extras: Mapping[str, Any] = field(default_factory=lambda: {})


class PromptContributor(Protocol):
    """Adds one part to the system prompt, or nothing."""

    name: str

    def contribute(self, context: PromptContext) -> str | None:
        """Return this contributor's part of the system prompt, or None."""
        ...


@dataclass
class _Contributor:
    name: str
    func: Any

    def contribute(self, context: PromptContext) -> str | None:
        text: str | None = self.func(context)
        return text.strip() if text and text.strip() else None


def _application(context: PromptContext) -> str | None:
    return context.agent.application.system_prompt if context.agent else None


def _agent(context: PromptContext) -> str | None:
    return context.agent.prompt if context.agent else None


def _persona(context: PromptContext) -> str | None:
    persona = context.action.persona
    return persona.prompt if persona else None


def skill_sentence(prompt: str) -> str:
    """Seed 000's label of a skill in the system prompt: ``Your skill: <prompt>.``."""
    text = prompt.strip()
    if not text.endswith((".", "!", "?")):
        text += "."
    return f"Your skill: {text}"


def _skills(context: PromptContext) -> str | None:
    if not context.action.progressive_disclosure:
        # Seed 000: every skill's prompt is in the system prompt from the start.
        return "\n".join(skill_sentence(skill.prompt) for skill in context.skills) or None
    # Progressive disclosure: only what each skill is for; its instructions
    # and tools arrive when the model activates it with use_skill.
    parts = [
        f"Your skill: {skill.name or skill.code} ({skill.code}): "
        f"{skill.description or skill.prompt.splitlines()[0]}"
        for skill in context.skills
    ]
    if parts:
        parts.append("Call use_skill with a skill's code to get its instructions and tools.")
    return "\n".join(parts) or None


def _mcp_clients(context: PromptContext) -> str | None:
    parts: list[str] = []
    for client in context.mcp_clients:
        line = f"Available tool '{client.name}': {client.description or 'tools of an MCP server'}"
        # Seed 000's llmSchemaInput / llmSchemaOutput: the payloads' shapes.
        for title, schema in (("Input", client.input_schema), ("Output", client.output_schema)):
            if schema:
                line += f"\n{title} data structure:\n{json.dumps(schema, indent=2, sort_keys=True)}"
        parts.append(line)
    return "\n".join(parts) or None


def output_json_schema(action: ActionRecord, direction: SchemaDirection) -> dict[str, Any] | None:
    """Return an action's schema for ``direction``, wrapped in an array for lists."""
    for item in action.schemas:
        if item.direction is direction:
            if item.cardinality is Cardinality.LIST:
                return {"type": "array", "items": item.json_schema}
            return dict(item.json_schema)
    return None


def _schemas(context: PromptContext) -> str | None:
    blocks: list[str] = []
    for direction, title in (
        (SchemaDirection.INPUT, "Input data structure:"),
        (SchemaDirection.OUTPUT, "Output data structure:"),
    ):
        schema = output_json_schema(context.action, direction)
        if schema is not None:
            blocks.append(f"{title}\n{json.dumps(schema, indent=2, sort_keys=True)}")
    return "\n\n".join(blocks) or None


def _constraint(context: PromptContext) -> str | None:
    action_type = context.action.type
    return action_type.constraint_prompt if action_type else None


def _action(context: PromptContext) -> str | None:
    return context.action.prompt


def default_contributors() -> list[PromptContributor]:
    """Return the built-in contributors in the documented order (``docs/runtime.md``)."""
    return [
        _Contributor("application", _application),
        _Contributor("agent", _agent),
        _Contributor("persona", _persona),
        _Contributor("skills", _skills),
        _Contributor("mcp_clients", _mcp_clients),
        _Contributor("schemas", _schemas),
        _Contributor("action_type", _constraint),
        _Contributor("action", _action),
    ]


def apply_instruction(instruction: str | None, mode: InstructionMode) -> str:
    """Combine a caller's instruction with the bundled default.

    Args:
        instruction: the caller's text, or None for the default alone.
        mode: replace the default, or append/prepend to it.

    Returns:
        The instruction that opens the system prompt.
    """
    if not instruction:
        return DEFAULT_INSTRUCTION
    if mode is InstructionMode.REPLACE:
        return instruction
    if mode is InstructionMode.APPEND:
        return f"{DEFAULT_INSTRUCTION}\n\n{instruction}"
    return f"{instruction}\n\n{DEFAULT_INSTRUCTION}"


def assemble(
    context: PromptContext,
    contributors: Sequence[PromptContributor],
    instruction: str,
) -> list[tuple[str, str]]:
    """Return the system prompt's parts as ``(contributor name, text)`` pairs."""
    parts = [("instruction", instruction)]
    for contributor in contributors:
        text = contributor.contribute(context)
        if text:
            parts.append((contributor.name, text))
    return parts


_FORMATTER = string.Formatter()


def template_fields(template: str) -> set[str]:
    """Return the ``{placeholder}`` names a template uses."""
    try:
        return {name for _, name, _, _ in _FORMATTER.parse(template) if name}
    except ValueError:
        # Unbalanced braces (e.g. a JSON example in a prompt) mean no template.
        return set()


class TemplateError(PilothouseError):
    """The input data does not fill the action prompt's placeholders."""


def fill_template(template: str, data: Mapping[str, Any]) -> str:
    """Fill ``{placeholders}`` from ``data``; other braces stay untouched.

    Raises:
        TemplateError: a placeholder has no value in ``data``.
    """
    names = template_fields(template)
    if not names:
        return template
    missing = sorted(name for name in names if name not in data)
    if missing:
        raise TemplateError(
            "the action prompt needs input data for "
            + ", ".join(f"'{name}'" for name in missing)
            + f" (given: {', '.join(sorted(data)) or 'nothing'})"
        )
    result = template
    for name in names:
        value = data[name]
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        result = result.replace("{" + name + "}", text)
    return result
