"""Action codes the runtime records its own conversations under.

Kept apart from the ORM models (which re-export them) so that the runtime
can refuse a reserved code without importing SQLAlchemy's ORM.
"""

from __future__ import annotations

__all__ = ["ADHOC_ACTION", "DIRECT_TOOL_ACTION", "RESERVED_ACTION_CODES"]

ADHOC_ACTION = "INVOKE"
"""The action code of every ad-hoc run's conversation (reserved)."""
DIRECT_TOOL_ACTION = "TOOLCALL"
"""The action code of every conversation that records a direct tool call (reserved)."""
RESERVED_ACTION_CODES: dict[str, str] = {
    ADHOC_ACTION: "the conversations of ad-hoc runs (/v1/invoke, run_adhoc)",
    DIRECT_TOOL_ACTION: "the conversations of direct tool calls (call_tool, MCP catalog tools)",
}
"""Action codes the runtime records its own conversations under, with what uses each."""
