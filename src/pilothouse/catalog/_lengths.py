"""Column lengths of the catalog's business keys.

Kept apart from the ORM models (which re-export them) so that code checking a
code's length, such as the scoped-memory settings, does not import SQLAlchemy
and the whole catalog mapping to read a number.
"""

from __future__ import annotations

__all__ = ["CODE", "MCP_NAME", "RELEASE_LENGTH", "SHORT_CODE", "TENANT_LENGTH", "TYPE_CODE"]

TENANT_LENGTH = 32
TYPE_CODE = 4
SHORT_CODE = 8
CODE = 12
MCP_NAME = 32
RELEASE_LENGTH = 20
"""genai-4j's ``version VARCHAR(20)`` of skills and tools (seed 002)."""
