"""The MCP server's resources: a tenant's transcripts, knowledge documents and skill prompts.

Three kinds of ``pilothouse://`` URIs, each read through the tenant's
facade (another tenant's conversation or collection is "not found"):

- ``pilothouse://skills/<CODE>``: an active skill's prompt (text);
- ``pilothouse://collections/<CODE>/documents/<id>``: a document of an
  active knowledge collection: its source, title, chunk count and metadata
  (JSON);
- ``pilothouse://conversations/<uuid>``: a conversation's transcript
  (JSON: fields, messages, tool calls, timeline), newest first.

``resources/list`` is paged: the first page holds the skills, the
documents and the newest conversations; each next page (its cursor) holds
older conversations. A key with an MCP tool allow-list sees resources only
when a pattern matches ``pilothouse_resources``.
"""

from __future__ import annotations

__all__ = ["RESOURCES_GRANT", "McpResources"]

import json
from typing import TYPE_CHECKING, Any

import mcp_types as mt

from pilothouse.errors import InvalidFieldError, NotFoundError

if TYPE_CHECKING:
    from pilothouse.api import Pilothouse
    from pilothouse.types import McpCaller

RESOURCES_GRANT = "pilothouse_resources"
"""The name a key's MCP allow-list must match for the key to see resources."""

_SCHEME = "pilothouse://"
_PAGE = 50
_JSON = "application/json"


def _cursor(text: str | None) -> int:
    if text is None:
        return 0
    if not text.isdigit():
        raise InvalidFieldError("cursor", "not a cursor this server gave; list from the start")
    return int(text)


class McpResources:
    """One tenant's resources, for one caller.

    Args:
        ph: the tenant's facade.
        caller: who asks (its allow-list decides whether resources are shown).
    """

    def __init__(self, ph: Pilothouse, caller: McpCaller) -> None:
        self._ph = ph
        self._allowed = caller.allows(RESOURCES_GRANT)

    async def list(self, cursor: str | None) -> mt.ListResourcesResult:
        """One page of resources; ``next_cursor`` names the next one."""
        if not self._allowed:
            return mt.ListResourcesResult(resources=[])
        offset = _cursor(cursor)
        found: list[mt.Resource] = []
        if offset == 0:
            found += await self._skills()
            found += await self._documents()
        page = await self._ph.query.list_conversations(limit=_PAGE, offset=offset)
        for conversation in page.items:
            found.append(
                mt.Resource(
                    uri=f"{_SCHEME}conversations/{conversation.uuid}",
                    name=f"conversation {conversation.uuid}",
                    title=f"{conversation.action_code} ({conversation.status.value}), "
                    f"{conversation.created_at.isoformat(timespec='seconds')}",
                    mime_type=_JSON,
                )
            )
        following = offset + len(page.items)
        more = following < page.total
        return mt.ListResourcesResult(resources=found, next_cursor=str(following) if more else None)

    async def _skills(self) -> list[mt.Resource]:
        return [
            mt.Resource(
                uri=f"{_SCHEME}skills/{entry.key}",
                name=entry.key,
                title=str(entry.document.get("name") or entry.key),
                description=str(entry.document.get("description") or "") or None,
                mime_type="text/plain",
            )
            for entry in await self._ph.catalog.list_entries("skills", active=True)
        ]

    async def _documents(self) -> list[mt.Resource]:
        found: list[mt.Resource] = []
        for entry in await self._ph.catalog.list_entries("document_collections", active=True):
            for document in await self._ph.knowledge.documents(entry.key):
                found.append(
                    mt.Resource(
                        uri=f"{_SCHEME}collections/{entry.key}/documents/{document.id}",
                        name=document.source,
                        title=document.title or document.source,
                        mime_type=_JSON,
                    )
                )
        return found

    async def read(self, uri: str) -> mt.ReadResourceResult:
        """Read one resource.

        Raises:
            NotFoundError: no such resource for this tenant (or not shown to this key).
        """
        missing = NotFoundError(f"no resource '{uri}'")
        if not self._allowed or not uri.startswith(_SCHEME):
            raise missing
        parts = uri.removeprefix(_SCHEME).split("/")
        if len(parts) == 2 and parts[0] == "conversations":
            transcript = await self._ph.query.get_transcript(parts[1])
            text = transcript.model_dump_json()
            return _contents(uri, text, _JSON)
        if len(parts) == 2 and parts[0] == "skills":
            entry = await self._ph.catalog.get("skills", parts[1])
            if not entry.active:
                raise missing
            return _contents(uri, str(entry.document.get("prompt") or ""), "text/plain")
        if len(parts) == 4 and parts[0] == "collections" and parts[2] == "documents":
            entry = await self._ph.catalog.get("document_collections", parts[1])
            if not entry.active:
                raise missing
            for document in await self._ph.knowledge.documents(parts[1]):
                if document.id == parts[3]:
                    body: dict[str, Any] = {
                        "id": document.id,
                        "source": document.source,
                        "title": document.title,
                        "chunks": document.chunks,
                        "metadata": document.metadata,
                    }
                    return _contents(uri, json.dumps(body, default=str), _JSON)
        raise missing


def _contents(uri: str, text: str, mime: str) -> mt.ReadResourceResult:
    return mt.ReadResourceResult(
        contents=[mt.TextResourceContents(uri=uri, text=text, mime_type=mime)]
    )
