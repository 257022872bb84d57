"""What the cross-tenant walk sends: every REST route, JSON-RPC method and MCP tool, classified.

Each REST route of the app (``(METHOD, path template)``), each built-in
JSON-RPC method and each kind of MCP tool maps to the calls tenant B makes
against tenant A's objects (:class:`~tenant_world.World`), or to
:class:`Global` with the reason it holds no tenant's data. A route, method
or tool missing here fails the walk: whoever adds one says how it is scoped.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tenant_world import MEMORY_ID, World

from pilothouse.catalog import KINDS


@dataclass(frozen=True)
class Call:
    """One HTTP request of tenant B.

    ``ui``: sent with B's browser session (the login cookie) instead of B's
    API key. ``late``: sent after every other call (it creates B's own rows
    under codes other calls expect to find only in A).
    """

    method: str
    path: str
    json: Any = None
    params: Mapping[str, Any] | None = None
    data: Mapping[str, Any] | None = None
    files: Any = None
    headers: Mapping[str, str] = field(default_factory=dict[str, str])
    ui: bool = False
    late: bool = False


@dataclass(frozen=True)
class Global:
    """A route that reads or writes no tenant's data, and why."""

    reason: str


Probes = Callable[[World], Sequence[Call]]

ASK = "What do you remember about me?"
A_ONLY = (
    ("actions", "ACMEONLY"),
    ("configurations", "ACFG"),
    ("budgets", "ACMEBDGT"),
    ("virtual_servers", "ACMEVS"),
)
"""Catalog rows only A has."""
SHARED = (
    ("actions", "ECHO"),
    ("agents", "HELPER"),
    ("applications", "APP"),
    ("configurations", "DFLT"),
    ("document_collections", "HANDBOOK"),
    ("memory_strategies", "SCPD"),
    ("models", "MINILM"),
    ("skills", "GREET"),
    ("tools", "ADD"),
    ("virtual_servers", "DESK"),
)
"""Catalog codes both tenants have, each with its own texts."""
TARGETS = ("action:ACMEONLY", "action:ECHO", "agent:HELPER")
MEMORY_SCOPES: tuple[dict[str, str], ...] = (
    {"scope": "user", "user_id": "alice"},
    {"scope": "organization"},
)


def _each_uuid(make: Callable[[str], Sequence[Call]]) -> Probes:
    return lambda w: [call for uuid in w.conversations for call in make(uuid)]


def _records(w: World) -> list[tuple[str, dict[str, str]]]:
    return [(w.memory_record, MEMORY_SCOPES[0]), (w.org_record, MEMORY_SCOPES[1])]


def _catalog_keys() -> list[tuple[str, str]]:
    return [*A_ONLY, *SHARED]


VIRTUAL_SERVERS = ("ACMEVS", "DESK")
"""A's own virtual server (unknown to B) and the code both tenants use."""


def _virtual_call(method: str, code: str) -> Call:
    """B at a virtual server's path (the tools are walked in test_tenant_walk)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    # The MCP transport on a loopback bind accepts loopback Host headers only.
    url = f"http://127.0.0.1:8000/mcp/{code}"
    return Call(method, url, json=body if method == "POST" else None, headers=headers)


def _ui_form(path: str, *, late: bool = False, **data: Any) -> Call:
    return Call("POST", path, data=data, ui=True, late=late)


REST: Mapping[tuple[str, str], Probes | Global] = {
    ("GET", "/healthz"): Global("liveness: answers a constant"),
    ("GET", "/readyz"): Global("readiness: the database and the schema revision, no rows"),
    ("GET", "/metrics"): Global(
        "the operator's monitoring (every tenant's counters, labelled by tenant): anonymous "
        "on a loopback bind, otherwise the scraper token only, never an API key "
        "(test_limits.py)"
    ),
    ("GET", "/openapi.json"): Global("the API's description"),
    ("HEAD", "/openapi.json"): Global("the API's description, no body"),
    ("GET", "/docs"): Global("Swagger UI over /openapi.json"),
    ("GET", "/redoc"): Global("ReDoc over /openapi.json"),
    ("GET", "/static/{path}"): Global("the browser UI's static files"),
    ("GET", "/"): Global("a redirect to the login page or the playground"),
    ("GET", "/login"): Global("the login form"),
    ("POST", "/login"): Global("checks the key it is given; the session is that key's tenant's"),
    ("POST", "/logout"): Global("ends the caller's own browser session"),
    ("POST", "/jsonrpc"): Global(
        "its methods are walked one by one (RPC below); batches and the legacy envelope "
        "dispatch to the same methods with the same tenant view"
    ),
    ("GET", "/mcp"): Global("the MCP transport's event stream; its tools are walked over POST"),
    ("POST", "/mcp"): Global("the MCP transport; its tools are walked one by one (MCP below)"),
    ("DELETE", "/mcp"): Global("ends the caller's own MCP session (bound to its key)"),
    ("HEAD", "/mcp"): Global("the MCP transport, no body"),
    ("POST", "/mcp/{server}"): lambda w: [_virtual_call("POST", code) for code in VIRTUAL_SERVERS],
    ("GET", "/mcp/{server}"): lambda w: [_virtual_call("GET", code) for code in VIRTUAL_SERVERS],
    ("HEAD", "/mcp/{server}"): lambda w: [_virtual_call("HEAD", code) for code in VIRTUAL_SERVERS],
    ("DELETE", "/mcp/{server}"): lambda w: [
        _virtual_call("DELETE", code) for code in VIRTUAL_SERVERS
    ],
    ("GET", "/sse"): Global("the legacy MCP transport's stream: the same server as /mcp"),
    ("HEAD", "/sse"): Global("the legacy MCP transport, no body"),
    ("POST", "/messages/"): Global(
        "the legacy MCP transport's posts: the same tools as /mcp, session bound to its key"
    ),
    ("GET", "/.well-known/oauth-protected-resource"): Global(
        "the OAuth protected-resource metadata: the operator's issuer and audience, no tenant data"
    ),
    ("HEAD", "/.well-known/oauth-protected-resource"): Global(
        "the OAuth protected-resource metadata: the operator's issuer and audience, no tenant data"
    ),
    ("GET", "/.well-known/oauth-protected-resource/mcp"): Global(
        "the OAuth protected-resource metadata: the operator's issuer and audience, no tenant data"
    ),
    ("HEAD", "/.well-known/oauth-protected-resource/mcp"): Global(
        "the OAuth protected-resource metadata: the operator's issuer and audience, no tenant data"
    ),
    # Catalog (REST)
    ("GET", "/v1/catalog"): lambda w: [
        Call("GET", "/v1/catalog"),
        Call("GET", "/v1/catalog", headers={"Accept": "application/json"}),
    ],
    ("PUT", "/v1/catalog"): lambda w: [
        Call(
            "PUT",
            "/v1/catalog",
            json={"configurations": [{"code": "ACFG", "max_tokens": 32}]},
            headers={"Content-Type": "application/json"},
            late=True,
        )
    ],
    ("GET", "/v1/catalog/{kind}"): lambda w: [Call("GET", f"/v1/catalog/{k}") for k in KINDS],
    ("POST", "/v1/catalog/{kind}"): lambda w: [
        Call(
            "POST",
            "/v1/catalog/actions",
            json={
                "code": "ACMEONLY",
                "prompt": "Bravo's own.",
                "model": "SCRIPTED",
                "configuration": "DFLT",
            },
            late=True,
        )
    ],
    ("GET", "/v1/catalog/{kind}/{key}"): lambda w: [
        Call("GET", f"/v1/catalog/{kind}/{key}") for kind, key in _catalog_keys()
    ],
    ("PUT", "/v1/catalog/{kind}/{key}"): lambda w: [
        Call(
            "PUT",
            f"/v1/catalog/{kind}/{key}",
            json={"code": key, "name": "taken", "prompt": "Bravo's.", "max_tokens": 16},
            headers={"If-Match": '"1"'},
        )
        for kind, key in A_ONLY
    ],
    ("DELETE", "/v1/catalog/{kind}/{key}"): lambda w: [
        Call("DELETE", f"/v1/catalog/{kind}/{key}") for kind, key in A_ONLY
    ],
    # Conversations
    ("POST", "/v1/conversations"): lambda w: [
        Call("POST", "/v1/conversations", json={"action": "ACMEONLY"}),
        Call("POST", "/v1/conversations", json={"action": "ECHO", "memoryId": MEMORY_ID}),
    ],
    ("GET", "/v1/conversations"): lambda w: [
        Call("GET", "/v1/conversations"),
        Call("GET", "/v1/conversations", params={"action": "ECHO", "limit": 1000}),
    ],
    ("GET", "/v1/conversations/{uuid}"): _each_uuid(
        lambda u: [Call("GET", f"/v1/conversations/{u}")]
    ),
    ("POST", "/v1/conversations/{uuid}/messages"): _each_uuid(
        lambda u: [
            Call("POST", f"/v1/conversations/{u}/messages", json={"text": ASK}),
            Call(
                "POST",
                f"/v1/conversations/{u}/messages",
                json={"text": ASK},
                params={"stream": "true"},
            ),
        ]
    ),
    ("POST", "/v1/conversations/{uuid}/answers"): _each_uuid(
        lambda u: [Call("POST", f"/v1/conversations/{u}/answers", json={"answers": {"q1": "y"}})]
    ),
    ("POST", "/v1/conversations/{uuid}/tool-results"): _each_uuid(
        lambda u: [
            Call(
                "POST",
                f"/v1/conversations/{u}/tool-results",
                json={"toolCallId": "call_1", "result": {"ok": True}},
            )
        ]
    ),
    ("POST", "/v1/conversations/{uuid}/cancel"): _each_uuid(
        lambda u: [Call("POST", f"/v1/conversations/{u}/cancel")]
    ),
    ("DELETE", "/v1/conversations/{uuid}/memory"): _each_uuid(
        lambda u: [Call("DELETE", f"/v1/conversations/{u}/memory")]
    ),
    ("POST", "/v1/conversations/{uuid}/recover"): _each_uuid(
        lambda u: [
            Call("POST", f"/v1/conversations/{u}/recover", json={"retry": retry})
            for retry in (True, False)
        ]
    ),
    # Audit
    ("GET", "/v1/audit/gateway-calls"): lambda w: [
        Call("GET", "/v1/audit/gateway-calls"),
        Call("GET", "/v1/audit/gateway-calls", params={"gateway": "ACMEGW"}),
        Call("GET", "/v1/audit/gateway-calls", params={"conversation": w.done}),
    ],
    # Budgets
    ("GET", "/v1/budgets/status"): lambda w: [Call("GET", "/v1/budgets/status")],
    ("GET", "/v1/usage"): lambda w: [
        Call("GET", "/v1/usage", params={"by": b}) for b in ("action", "user", "key", "model")
    ],
    # Evaluation: B builds datasets from its own conversations only; A's names are not found.
    ("GET", "/v1/evaluation/datasets"): lambda w: [Call("GET", "/v1/evaluation/datasets")],
    ("POST", "/v1/evaluation/datasets"): lambda w: [
        Call("POST", "/v1/evaluation/datasets", json={"name": "bset", "from_conversations": True}),
        Call("GET", "/v1/evaluation/datasets/bset/cases"),
    ],
    ("GET", "/v1/evaluation/datasets/{name}/cases"): lambda w: [
        Call("GET", "/v1/evaluation/datasets/aset/cases")
    ],
    ("DELETE", "/v1/evaluation/datasets/{name}"): lambda w: [
        Call("DELETE", "/v1/evaluation/datasets/aset")
    ],
    ("POST", "/v1/evaluation/replays"): lambda w: [
        Call("POST", "/v1/evaluation/replays", json={"dataset": "aset"})
    ],
    ("GET", "/v1/evaluation/replays/{run}"): lambda w: [Call("GET", "/v1/evaluation/replays/arun")],
    ("POST", "/v1/evaluation/replays/{run}/report"): lambda w: [
        Call("POST", "/v1/evaluation/replays/arun/report", json={})
    ],
    # OpenAI-compatible
    ("POST", "/v1/chat/completions"): lambda w: (
        [
            Call(
                "POST",
                "/v1/chat/completions",
                json={"model": target, "messages": [{"role": "user", "content": ASK}]},
                headers={"X-Pilothouse-Memory-Id": MEMORY_ID},
            )
            for target in TARGETS
        ]
        + [
            Call(
                "POST",
                "/v1/chat/completions",
                json={
                    "model": "action:ECHO",
                    "stream": True,
                    "messages": [{"role": "user", "content": ASK}],
                },
                headers={"X-Pilothouse-Memory-Id": MEMORY_ID},
            )
        ]
    ),
    ("GET", "/v1/models"): lambda w: [Call("GET", "/v1/models")],
    ("GET", "/v1/models/{model_id}"): lambda w: [
        Call("GET", f"/v1/models/{target}") for target in TARGETS
    ],
    ("POST", "/v1/embeddings"): lambda w: [
        Call("POST", "/v1/embeddings", json={"model": "MINILM", "input": "the vault"})
    ],
    # Connector
    ("POST", "/v1/invoke"): lambda w: [
        Call(
            "POST",
            "/v1/invoke",
            json={
                "agentName": "probe",
                "message": ASK,
                "model": "SCRIPTED",
                "useChatMemory": True,
                "memoryId": MEMORY_ID,
            },
        ),
        Call(
            "POST",
            "/v1/invoke",
            json={"agentName": "probe", "message": ASK, "model": "SCRIPTED", "tools": ["add"]},
        ),
        Call(
            "POST",
            "/v1/invoke",
            json={
                "agentName": "probe",
                "message": "vault opens",
                "model": "SCRIPTED",
                "collection": "HANDBOOK",
            },
        ),
    ],
    # Knowledge
    ("POST", "/v1/knowledge/collections/{code}/documents"): lambda w: [
        Call(
            "POST",
            "/v1/knowledge/collections/HANDBOOK/documents",
            json={"texts": [{"source": w.document, "text": "Bravo's own page."}]},
        ),
        Call(
            "POST",
            "/v1/knowledge/collections/HANDBOOK/documents",
            json={"texts": [{"source": w.document, "text": "Again."}], "reingest": True},
        ),
    ],
    ("POST", "/v1/knowledge/collections/{code}/jobs"): lambda w: [
        Call(
            "POST",
            "/v1/knowledge/collections/HANDBOOK/jobs",
            json={"texts": [{"source": w.document, "text": "Bravo's job page."}]},
        )
    ],
    ("GET", "/v1/knowledge/collections/{code}/jobs/{job_id}"): lambda w: [
        Call("GET", f"/v1/knowledge/collections/HANDBOOK/jobs/{w.ingest_job}")
    ],
    ("POST", "/v1/knowledge/collections/{code}/search"): lambda w: [
        Call(
            "POST",
            "/v1/knowledge/collections/HANDBOOK/search",
            json={"query": "when does the vault open", "mode": mode},
        )
        for mode in ("vector", "keyword", "hybrid")
    ],
    ("GET", "/v1/knowledge/collections/{code}/documents"): lambda w: [
        Call("GET", "/v1/knowledge/collections/HANDBOOK/documents")
    ],
    ("GET", "/v1/knowledge/collections/{code}/chunks"): lambda w: [
        Call("GET", "/v1/knowledge/collections/HANDBOOK/chunks", params={"source": w.document})
    ],
    ("DELETE", "/v1/knowledge/collections/{code}/documents"): lambda w: [
        Call(
            "DELETE",
            "/v1/knowledge/collections/HANDBOOK/documents",
            params={"source": w.document},
        )
    ],
    # Scoped memory
    ("GET", "/v1/memory"): lambda w: [Call("GET", "/v1/memory", params=s) for s in MEMORY_SCOPES],
    ("POST", "/v1/memory"): lambda w: [
        Call("POST", "/v1/memory", json={**MEMORY_SCOPES[0], "content": "Alice of bravo."})
    ],
    ("POST", "/v1/memory/search"): lambda w: [
        Call(
            "POST",
            "/v1/memory/search",
            json={"query": "locker code", "scopes": list(MEMORY_SCOPES)},
        )
    ],
    ("GET", "/v1/memory/jobs"): lambda w: [
        Call("GET", "/v1/memory/jobs"),
        Call("GET", "/v1/memory/jobs", params={"status": "pending"}),
    ],
    ("POST", "/v1/memory/jobs/run"): lambda w: [Call("POST", "/v1/memory/jobs/run")],
    ("POST", "/v1/memory/erase-user"): lambda w: [
        Call("POST", "/v1/memory/erase-user", json={"user_id": "alice"}, late=True)
    ],
    ("GET", "/v1/memory/users/{user_id}/export"): lambda w: [
        Call("GET", "/v1/memory/users/alice/export")
    ],
    ("GET", "/v1/memory/{memory_id}/versions"): lambda w: [
        Call("GET", f"/v1/memory/{i}/versions", params=s) for i, s in _records(w)
    ],
    ("GET", "/v1/memory/{memory_id}"): lambda w: [
        Call("GET", f"/v1/memory/{i}", params=s) for i, s in _records(w)
    ],
    ("PATCH", "/v1/memory/{memory_id}"): lambda w: [
        Call("PATCH", f"/v1/memory/{i}", json={**s, "content": "changed"}) for i, s in _records(w)
    ],
    ("DELETE", "/v1/memory/{memory_id}"): lambda w: [
        Call("DELETE", f"/v1/memory/{i}", params=s) for i, s in _records(w)
    ],
    # Browser UI: the spend page (the tenant's budgets and usage)
    ("GET", "/spend"): lambda w: [Call("GET", "/spend", ui=True)],
    # Browser UI: the playground
    ("GET", "/playground"): lambda w: [
        Call("GET", "/playground", ui=True),
        *(Call("GET", "/playground", params={"c": u}, ui=True) for u in w.conversations),
    ],
    ("GET", "/ui/conversations"): lambda w: [
        Call("GET", "/ui/conversations", params={"c": w.done}, ui=True)
    ],
    ("GET", "/ui/conversations/{uuid}"): _each_uuid(
        lambda u: [Call("GET", f"/ui/conversations/{u}", ui=True)]
    ),
    ("POST", "/ui/conversations/{uuid}/rename"): _each_uuid(
        lambda u: [_ui_form(f"/ui/conversations/{u}/rename", title="taken")]
    ),
    ("POST", "/ui/conversations/{uuid}/delete"): _each_uuid(
        lambda u: [_ui_form(f"/ui/conversations/{u}/delete")]
    ),
    ("GET", "/ui/conversations/{uuid}/export"): _each_uuid(
        lambda u: [Call("GET", f"/ui/conversations/{u}/export", ui=True)]
    ),
    ("POST", "/ui/conversations/import"): lambda w: [
        Call(
            "POST",
            "/ui/conversations/import",
            files={"file": ("copy.json", w.export_copy.encode(), "application/json")},
            ui=True,
        )
    ],
    ("GET", "/ui/conversations/{uuid}/timeline"): _each_uuid(
        lambda u: [Call("GET", f"/ui/conversations/{u}/timeline", ui=True)]
    ),
    ("GET", "/ui/settings"): lambda w: [
        Call("GET", "/ui/settings", params={"target": t}, ui=True) for t in TARGETS
    ],
    ("POST", "/ui/configurations/{code}"): lambda w: [
        _ui_form(f"/ui/configurations/{code}", target="action:ECHO", version="1", max_tokens="8")
        for code in ("ACFG", "DFLT")
    ],
    ("POST", "/ui/configurations/{code}/duplicate"): lambda w: [
        _ui_form("/ui/configurations/ACFG/duplicate", target="action:ECHO", new_code="BCPY")
    ],
    # Browser UI: replay runs side by side (A's run and dataset by name).
    ("GET", "/ui/evaluation"): lambda w: [Call("GET", "/ui/evaluation", ui=True)],
    ("GET", "/ui/evaluation/compare"): lambda w: [
        Call("GET", "/ui/evaluation/compare", params={"run": "arun"}, ui=True),
        Call("GET", "/ui/evaluation/compare", params={"run": "brun", "against": "arun"}, ui=True),
    ],
    ("GET", "/ui/system-prompt"): lambda w: [
        Call("GET", "/ui/system-prompt", params={"target": t}, ui=True) for t in TARGETS
    ],
    ("GET", "/ui/template"): lambda w: [
        Call("GET", "/ui/template", params={"target": t, "c": w.done, "sequence": 1}, ui=True)
        for t in TARGETS
    ],
    ("POST", "/ui/template/{code}"): lambda w: [
        _ui_form("/ui/template/ACMEONLY", prompt="Bravo's.", version="1")
    ],
    ("POST", "/ui/chat"): lambda w: (
        [Call("POST", "/ui/chat", json={"target": t, "text": ASK}, ui=True) for t in TARGETS]
        + [
            Call(
                "POST",
                "/ui/chat",
                json={"conversation": u, "target": "action:ECHO", "text": ASK},
                ui=True,
            )
            for u in w.conversations
        ]
    ),
    ("POST", "/ui/conversations/{uuid}/prompts/{sequence}"): _each_uuid(
        lambda u: [
            _ui_form(f"/ui/conversations/{u}/prompts/1", op=op, text="edited")
            for op in ("save", "submit", "delete", "delete_following", "resubmit")
        ]
    ),
    ("POST", "/ui/conversations/{uuid}/answers"): _each_uuid(
        lambda u: [
            Call("POST", f"/ui/conversations/{u}/answers", data={"answer:q1": "yes"}, ui=True)
        ]
    ),
    ("POST", "/ui/conversations/{uuid}/tool-results"): _each_uuid(
        lambda u: [_ui_form(f"/ui/conversations/{u}/tool-results", call_id="c1", result="1")]
    ),
    ("POST", "/ui/conversations/{uuid}/cancel"): _each_uuid(
        lambda u: [_ui_form(f"/ui/conversations/{u}/cancel")]
    ),
    # Browser UI: compare (A's configuration and A-only action are not found for B)
    ("GET", "/compare"): lambda w: [
        Call("GET", "/compare", params={"target": list(TARGETS)}, ui=True)
    ],
    ("POST", "/ui/compare"): lambda w: [
        Call(
            "POST",
            "/ui/compare",
            json={
                "text": ASK,
                "columns": [{"target": t, "configuration": c} for t in TARGETS[:2]],
            },
            ui=True,
        )
        for c in ("ACFG", "DFLT", "")
    ],
    # Browser UI: knowledge (A's document source, read and overwritten by B's upload)
    ("GET", "/knowledge"): lambda w: [Call("GET", "/knowledge", ui=True)],
    ("GET", "/knowledge/{code}"): lambda w: [Call("GET", "/knowledge/HANDBOOK", ui=True)],
    ("GET", "/ui/knowledge/{code}/documents"): lambda w: [
        Call("GET", "/ui/knowledge/HANDBOOK/documents", ui=True)
    ],
    ("GET", "/ui/knowledge/{code}/chunks"): lambda w: [
        Call("GET", "/ui/knowledge/HANDBOOK/chunks", params={"source": w.document}, ui=True)
    ],
    ("GET", "/ui/knowledge/{code}/search"): lambda w: [
        Call("GET", "/ui/knowledge/HANDBOOK/search", params={"q": ASK}, ui=True)
    ],
    ("POST", "/ui/knowledge/{code}/upload"): lambda w: [
        Call(
            "POST",
            "/ui/knowledge/HANDBOOK/upload",
            files={"files": (w.document, b"Bravo's own text.", "text/plain")},
            ui=True,
        )
    ],
    # Browser UI: memory (A's user and A's record ids)
    ("GET", "/memory"): lambda w: [Call("GET", "/memory", params={"user": "alice"}, ui=True)],
    ("GET", "/ui/memory/{user_id}/records"): lambda w: [
        Call("GET", "/ui/memory/alice/records", ui=True)
    ],
    ("POST", "/ui/memory/{user_id}/records/{memory_id}"): lambda w: [
        _ui_form(f"/ui/memory/alice/records/{w.memory_record}", content="Bravo's.")
    ],
    ("POST", "/ui/memory/{user_id}/records/{memory_id}/forget"): lambda w: [
        _ui_form(f"/ui/memory/alice/records/{w.memory_record}/forget")
    ],
    ("GET", "/ui/memory/{user_id}/export"): lambda w: [
        Call("GET", "/ui/memory/alice/export", ui=True)
    ],
    ("POST", "/ui/memory/{user_id}/erase"): lambda w: [
        _ui_form("/ui/memory/alice/erase", confirm="alice", reason="walk", late=True)
    ],
    # Browser UI: the catalog
    ("GET", "/catalog"): lambda w: [Call("GET", "/catalog", ui=True)],
    ("GET", "/catalog/{kind}"): lambda w: [
        *(Call("GET", f"/catalog/{k}", ui=True) for k in KINDS),
        Call("GET", "/catalog/configurations", params={"q": "Acme", "page": 2}, ui=True),
    ],
    ("GET", "/catalog/{kind}/new"): lambda w: [Call("GET", "/catalog/actions/new", ui=True)],
    ("POST", "/catalog/{kind}/new"): lambda w: [
        _ui_form("/catalog/configurations/new", code="ACFG", max_tokens="16", late=True)
    ],
    ("GET", "/catalog/{kind}/{key}"): lambda w: [
        Call("GET", f"/catalog/{kind}/{key}", ui=True) for kind, key in _catalog_keys()
    ],
    ("POST", "/catalog/{kind}/{key}"): lambda w: [
        _ui_form(f"/catalog/{kind}/{key}", code=key, prompt="Bravo's.", max_tokens="8", version="1")
        for kind, key in A_ONLY
    ],
    ("POST", "/catalog/{kind}/{key}/delete"): lambda w: [
        _ui_form(f"/catalog/{kind}/{key}/delete") for kind, key in A_ONLY
    ],
}
"""Every REST route of the app: the calls B makes against A's objects, or why it is global."""


ROUTED = {
    "bravo-1/llm/echo/1.0.0": "action:ECHO",
    "bravo-1/llm/helper/1.0.0": "agent:HELPER",
    "bravo-1/llm/only/1.0.0": "action:ACMEONLY",
}
"""The deployment's own JSON-RPC methods (``PILOTHOUSE_SERVER_JSONRPC_ACTIONS``): catalog
targets, resolved in the caller's tenant."""


def _rpc(name: str) -> str:
    return f"pilothouse/{name}/v1"


def _rpc_uuid(name: str, **extra: Any) -> Callable[[World], list[dict[str, Any]]]:
    return lambda w: [{"uuid": u, **extra} for u in w.conversations]


_TEXT_ATTACHMENT = {"mediaType": "text/plain", "contentBase64": base64.b64encode(b"x").decode()}

RPC: Mapping[str, Callable[[World], list[dict[str, Any]]]] = {
    _rpc("query/getAllActions"): lambda w: [{}, {"includeInactive": True}],
    _rpc("query/findActionByCode"): lambda w: [{"code": "ACMEONLY"}, {"code": "ECHO"}],
    _rpc("query/findAgentByCode"): lambda w: [{"code": "HELPER"}],
    _rpc("query/findToolByCode"): lambda w: [{"code": "ADD"}],
    _rpc("query/findMcpClientByName"): lambda w: [{"name": "acme-mcp"}],
    _rpc("query/findConversation"): _rpc_uuid("findConversation"),
    _rpc("query/getConversation"): _rpc_uuid("getConversation"),
    _rpc("query/getConversationMessages"): _rpc_uuid("getConversationMessages"),
    _rpc("query/getPendingQuestions"): _rpc_uuid("getPendingQuestions"),
    _rpc("query/listConversations"): lambda w: [{}, {"action": "ECHO", "limit": 1000}],
    _rpc("query/getTranscript"): _rpc_uuid("getTranscript"),
    _rpc("command/startConversation"): lambda w: [
        {"action": "ACMEONLY"},
        {"action": "ECHO", "memoryId": MEMORY_ID},
    ],
    _rpc("command/sendMessage"): _rpc_uuid("sendMessage", text=ASK),
    _rpc("command/startAndSend"): lambda w: [
        {"action": "ECHO", "text": ASK, "memoryId": MEMORY_ID},
        {"action": "ACMEONLY", "text": ASK},
    ],
    _rpc("command/sendMessageWithAttachments"): _rpc_uuid(
        "sendMessageWithAttachments", text=ASK, attachments=[_TEXT_ATTACHMENT]
    ),
    _rpc("command/checkMessage"): lambda w: [
        {"action": "ACMEONLY", "text": ASK},
        {"action": "ECHO", "agent": "HELPER", "text": ASK},
    ],
    _rpc("command/submitAnswers"): _rpc_uuid("submitAnswers", answers={"q1": "yes"}),
    _rpc("command/submitToolResult"): _rpc_uuid("submitToolResult", toolCallId="c1", result=1),
    _rpc("command/expireWaiting"): lambda w: [{}],
    _rpc("command/cancel"): _rpc_uuid("cancel"),
    _rpc("command/clearMemory"): lambda w: [{"memoryId": MEMORY_ID}],
    _rpc("command/recover"): lambda w: [
        {"uuid": u, "retry": r} for u in w.conversations for r in (True, False)
    ],
    _rpc("query/getMemoryMessages"): lambda w: [{"memoryId": MEMORY_ID}],
    _rpc("query/findTarget"): lambda w: [{"targetId": t} for t in TARGETS],
    _rpc("query/listTargets"): lambda w: [{}],
    _rpc("query/budgetStatus"): lambda w: [{}],
    _rpc("query/usage"): lambda w: [{"by": ["action", "user", "key", "model"]}],
    _rpc("query/listGatewayCalls"): lambda w: [
        {},
        {"gateway": "ACMEGW"},
        {"conversationUuid": w.done},
    ],
    _rpc("command/callableTools"): lambda w: [{}],
    _rpc("command/callTool"): lambda w: [{"name": "add", "arguments": {"a": 1, "b": 2}}],
    _rpc("command/runAdhoc"): lambda w: [
        {"name": "probe", "message": ASK, "model": "SCRIPTED", "memory": {"memoryId": MEMORY_ID}},
        {"name": "probe", "message": "vault", "model": "SCRIPTED", "collection": "HANDBOOK"},
        {"name": "probe", "message": ASK, "model": "SCRIPTED", "tools": ["add"]},
    ],
    _rpc("memory/list"): lambda w: list(MEMORY_SCOPES),
    _rpc("memory/search"): lambda w: [{"query": "locker code", "scopes": list(MEMORY_SCOPES)}],
    _rpc("memory/add"): lambda w: [{**MEMORY_SCOPES[0], "content": "Alice of bravo."}],
    _rpc("memory/get"): lambda w: [{**s, "memoryId": i} for i, s in _records(w)],
    _rpc("memory/versions"): lambda w: [{**s, "memoryId": i} for i, s in _records(w)],
    _rpc("memory/edit"): lambda w: [
        {**s, "memoryId": i, "content": "changed"} for i, s in _records(w)
    ],
    _rpc("memory/forget"): lambda w: [{**s, "memoryId": i} for i, s in _records(w)],
    # B's own dataset from B's conversations, then A's dataset and run by name.
    _rpc("evaluation/listDatasets"): lambda w: [{}],
    _rpc("evaluation/createDataset"): lambda w: [
        {"name": "brpc", "fromConversations": True},
        {"name": "brpc-cases", "cases": [{"action": "ECHO", "inputText": ASK}]},
    ],
    _rpc("evaluation/getDatasetCases"): lambda w: [{"name": "brpc"}, {"name": "aset"}],
    _rpc("evaluation/replay"): lambda w: [
        {"dataset": "brpc-cases", "run": "brun"},
        {"dataset": "aset"},
        {"dataset": "brpc-cases", "run": "arun"},
    ],
    _rpc("evaluation/getRun"): lambda w: [{"run": "brun"}, {"run": "arun"}],
    _rpc("evaluation/listRuns"): lambda w: [{}],
    _rpc("evaluation/report"): lambda w: [
        {"run": "brun", "scorers": ["exact", "judge:SCRIPTED"]},
        {"run": "arun"},
        {"run": "brun", "against": "arun"},
    ],
    _rpc("evaluation/deleteDataset"): lambda w: [{"name": "aset"}, {"name": "brpc"}],
}
"""Every built-in JSON-RPC method: the params B sends against A's objects."""


def mcp_arguments(name: str, w: World) -> list[dict[str, Any]]:
    """The arguments B calls an MCP tool with; unknown tool kinds fail the walk."""
    if name == "pilothouse_answer":
        return [{"conversation_uuid": u, "answers": {"q1": "yes"}} for u in w.conversations]
    if name == "pilothouse_find_actions":
        return [{"query": "assistant"}, {}]
    if name == "pilothouse_run_action":
        return [{"tool": "action_ACMEONLY", "arguments": {"message": ASK}}]
    if name.startswith(("action_", "agent_")):
        return [{"message": ASK}]
    if name == "tool_add":
        return [{"a": 1, "b": 2}]
    if name.startswith("pilothouse_memory_"):
        return _memory_tool_arguments(name.removeprefix("pilothouse_memory_"), w)
    raise AssertionError(
        f"MCP tool {name} is not classified: say in tenant_probes.mcp_arguments what tenant "
        "B calls it with against tenant A's objects"
    )


def _memory_tool_arguments(op: str, w: World) -> list[dict[str, Any]]:
    """The memory tools: B names A's scopes and A's record ids (as JSON-RPC's memory.*)."""
    if op == "list":
        return list(MEMORY_SCOPES)
    if op == "search":
        return [{**s, "query": "locker code"} for s in MEMORY_SCOPES]
    if op == "add":
        return [{**MEMORY_SCOPES[0], "content": "Alice of bravo."}]
    if op == "edit":
        return [{**s, "memory_id": i, "content": "changed"} for i, s in _records(w)]
    if op in ("get", "versions", "forget"):
        return [{**s, "memory_id": i} for i, s in _records(w)]
    raise AssertionError(f"MCP memory tool {op} is not classified in tenant_probes")


A_ONLY_TOOLS = ("action_ACMEONLY",)
"""MCP tools only A has: B calling them by name must reach nothing."""
