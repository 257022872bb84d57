"""`pilothouse knowledge` commands: ingest, search, list and delete documents of a collection.

``ingest`` shows a progress bar (Rich) while it reads, chunks and embeds;
a document that fails is reported and skipped, and the exit code says so
(1 when any failed, 0 otherwise; 2 for a usage error such as an unknown
collection). ``search`` runs retrieval without a model, to test it.
"""

from __future__ import annotations

__all__ = ["app"]

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pilothouse.cli._context import CliState, fail, open_facade, run

if TYPE_CHECKING:
    from pilothouse.types import DocumentInfo, IngestProgress, IngestResult, SearchResult

app = typer.Typer(
    help="Ingest documents into a document collection, search it, list and delete documents.",
    no_args_is_help=True,
)


def _metadata(pairs: list[str]) -> dict[str, Any]:
    """``key=value`` options as a mapping (a value that reads as JSON is parsed)."""
    metadata: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"--metadata '{pair}': write key=value")
        try:
            # Any integer is read; the facade names one too large. (Imported here:
            # the CLI starts without the facade.)
            from pilothouse.api import loads_json

            metadata[key] = loads_json(value, check=False)
        except json.JSONDecodeError:
            metadata[key] = value
    return metadata


def _filters(pairs: list[str]) -> dict[str, Any]:
    filters: dict[str, Any] = {}
    for key, value in _metadata(pairs).items():
        if key in filters:
            existing = filters[key]
            filters[key] = [*existing, value] if isinstance(existing, list) else [existing, value]
        else:
            filters[key] = value
    return filters


@app.command()
def ingest(
    ctx: typer.Context,
    collection: Annotated[str, typer.Argument(help="The document collection's code.")],
    sources: Annotated[
        list[str],
        typer.Argument(help="Files, folders (walked recursively) and http(s) URLs."),
    ],
    metadata: Annotated[
        list[str] | None,
        typer.Option("--metadata", "-m", help="key=value added to every document (repeatable)."),
    ] = None,
    reingest: Annotated[
        bool,
        typer.Option(
            "--reingest", help="Delete each document first: embed it again even if unchanged."
        ),
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Read, chunk, embed and store documents (txt, md, html, pdf, docx).

    Unchanged documents are left as they are; a document that fails is
    reported and skipped, nothing of it written. Exit code 1 when any failed.
    """
    state: CliState = ctx.obj
    given = _metadata(metadata or [])
    console = Console(stderr=True)
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[current]}"),
        console=console,
        disable=quiet,
        transient=False,
    )
    task = progress.add_task(f"ingest {collection}", total=None, current="")

    def step(event: IngestProgress) -> None:
        name = event.source if len(event.source) <= 60 else "…" + event.source[-59:]
        if event.event == "started":
            progress.update(task, total=event.total, current=name)
            return
        if event.event == "embedding":
            progress.update(task, current=f"{name} ({event.embedded}/{event.chunks} chunks)")
            return
        progress.update(task, total=event.total, completed=event.index, current=name)
        if event.event == "failed":
            # One line whatever the terminal's width (a path cut in two is
            # not greppable), and a path is text, not Rich markup.
            progress.console.print(
                f"[red]failed[/red] {escape(event.source)}: {escape(event.error or '')}",
                soft_wrap=True,
            )

    async def body() -> IngestResult:
        async with open_facade(state) as ph:
            call = ph.knowledge.reingest if reingest else ph.knowledge.ingest
            # The operator names these URLs: no egress check (the service applies it).
            return await call(collection, sources, metadata=given, progress=step, check_urls=False)

    with progress:
        result = run(body)
    counts = {
        status: result.count(status)
        for status in ("added", "replaced", "unchanged", "skipped", "failed")
    }
    summary = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    chunks = sum(d.chunks for d in result.documents if d.status in ("added", "replaced"))
    typer.echo(
        f"{result.collection}: {summary or 'nothing to do'}; {chunks} chunks written "
        f"(chunk size {result.chunk_size}, overlap {result.chunk_overlap}, model {result.model})"
    )
    for document in result.documents:
        if document.status == "skipped":
            typer.echo(f"skipped {document.source}: {document.error}", err=True)
    if result.failed:
        raise typer.Exit(code=1)


@app.command()
def search(
    ctx: typer.Context,
    collection: Annotated[str, typer.Argument(help="The document collection's code.")],
    query: Annotated[str, typer.Argument(help="The question.")],
    top_k: Annotated[
        int | None,
        typer.Option("--top-k", "-k", min=1, help="Hits at most (default: the collection's)."),
    ] = None,
    threshold: Annotated[
        float | None,
        typer.Option("--threshold", min=-1.0, max=1.0, help="Least cosine similarity."),
    ] = None,
    where: Annotated[
        list[str] | None,
        typer.Option("--filter", "-f", help="key=value metadata filter (repeat a key for OR)."),
    ] = None,
    mode: Annotated[
        str | None,
        typer.Option("--mode", help="hybrid, vector or text (default: the collection's)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Search a collection as the retrieval advisor would, without calling a model."""
    state: CliState = ctx.obj
    if mode is not None and mode not in ("hybrid", "vector", "text"):
        fail(f"--mode must be hybrid, vector or text, not '{mode}'")
    filters = _filters(where or [])

    async def body() -> SearchResult:
        async with open_facade(state) as ph:
            return await ph.knowledge.search(
                collection,
                query,
                top_k=top_k,
                threshold=threshold,
                filters=filters,
                mode=mode,
            )

    result = run(body)
    if as_json:
        typer.echo(json.dumps(_search_json(result), ensure_ascii=False, indent=2))
        return
    console = Console(soft_wrap=True)
    if not result.hits:
        best = (
            f"; best similarity {result.best_similarity:.3f}"
            if result.best_similarity is not None
            else ""
        )
        console.print(
            f"{result.collection}: no hits ({result.status.replace('_', ' ')}, threshold "
            f"{result.threshold:.2f}{best})"
        )
        return
    for number, hit in enumerate(result.hits, start=1):
        where_from = f"{hit.source}" + (f" › {hit.heading}" if hit.heading else "")
        console.print(
            f"[bold][{number}][/bold] {hit.title}  [dim]{where_from}[/dim]  "
            f"similarity {hit.similarity:.3f}  chunk {hit.chunk_id}",
            markup=True,
            highlight=False,
        )
        text = " ".join(hit.text.split())
        console.print(f"    {text[:300]}{'…' if len(text) > 300 else ''}", markup=False)
    if result.query_truncated:
        console.print("(the query was longer than the model reads and was cut)")


def _search_json(result: SearchResult) -> dict[str, Any]:
    return {
        "collection": result.collection,
        "query": result.query,
        "status": result.status,
        "top_k": result.top_k,
        "threshold": result.threshold,
        "mode": result.mode,
        "best_similarity": result.best_similarity,
        "below_threshold": result.below_threshold,
        "query_truncated": result.query_truncated,
        "hits": [
            {
                "chunk_id": hit.chunk_id,
                "document_id": hit.document_id,
                "source": hit.source,
                "title": hit.title,
                "heading": hit.heading,
                "position": hit.position,
                "similarity": hit.similarity,
                "score": hit.score,
                "text": hit.text,
                "metadata": hit.metadata,
            }
            for hit in result.hits
        ],
    }


@app.command()
def documents(
    ctx: typer.Context,
    collection: Annotated[str, typer.Argument(help="The document collection's code.")],
) -> None:
    """List a collection's documents: source, title, chunks, last written."""
    state: CliState = ctx.obj

    async def body() -> list[DocumentInfo]:
        async with open_facade(state) as ph:
            return await ph.knowledge.documents(collection)

    found = run(body)
    table = Table("source", "title", "chunks", "updated")
    for info in found:
        updated = info.updated_at.strftime("%Y-%m-%d %H:%M:%S") if info.updated_at else "-"
        table.add_row(info.source, info.title, str(info.chunks), updated)
    Console(soft_wrap=True).print(table)
    typer.echo(f"{len(found)} documents", err=True)


@app.command()
def delete(
    ctx: typer.Context,
    collection: Annotated[str, typer.Argument(help="The document collection's code.")],
    source: Annotated[str, typer.Argument(help="The document's source, as 'documents' lists it.")],
) -> None:
    """Delete a document and its chunks (exit code 2 when there is none)."""
    state: CliState = ctx.obj

    async def body() -> bool:
        async with open_facade(state) as ph:
            return await ph.knowledge.delete_document(collection, source)

    if not run(body):
        fail(f"collection {collection} has no document '{source}'")
    typer.echo(f"deleted {source} from {collection}")


@app.command()
def doctor(
    ctx: typer.Context,
    collection: Annotated[str, typer.Argument(help="The document collection's code.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
) -> None:
    """Check a collection's store, model and contents (exit code 1 when a check fails)."""
    state: CliState = ctx.obj

    async def body() -> list[dict[str, Any]]:
        async with open_facade(state) as ph:
            return [check.as_json() for check in await ph.knowledge.doctor(collection)]

    checks = run(body)
    if as_json:
        typer.echo(json.dumps(checks, ensure_ascii=False, indent=2))
    else:
        for check in checks:
            typer.echo(f"{'ok  ' if check['ok'] else 'FAIL'} {check['name']}: {check['detail']}")
    if not all(check["ok"] for check in checks):
        raise typer.Exit(1)
