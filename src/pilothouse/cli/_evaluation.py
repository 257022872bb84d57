"""`pilothouse datasets`, `replay` and `eval`: regression tests from recorded traffic.

``datasets create NAME --from-conversations`` takes recorded conversations
as cases; ``replay DATASET`` runs them again on another model,
configuration or options with tool calls answered from the recording;
``eval DATASET --against BASELINE`` scores a run and exits 1 when a scorer is
below its threshold or regressed by more than the margin.
"""

from __future__ import annotations

__all__ = ["app", "eval_run", "replay"]

import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from pilothouse.cli._context import CliState, fail, open_facade, run
from pilothouse.cli._run import parse_assignments

if TYPE_CHECKING:
    from pilothouse.types import DatasetInfo, EvalReport, ReplayRun

app = typer.Typer(help="Build, export and import evaluation datasets.", no_args_is_help=True)


def _show(info: DatasetInfo) -> None:
    typer.echo(f"{info.name}\t{info.cases} cases\t{info.description}".rstrip())


@app.command()
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The dataset's name.")],
    from_conversations: Annotated[
        bool,
        typer.Option("--from-conversations", help="Fill it from recorded conversations."),
    ] = False,
    action: Annotated[str | None, typer.Option("--action", help="Only this action.")] = None,
    agent: Annotated[str | None, typer.Option("--agent", help="Only this agent.")] = None,
    status: Annotated[
        str, typer.Option("--status", help="Only this status code (CO, FA, ...; 'any').")
    ] = "CO",
    since: Annotated[
        datetime | None, typer.Option("--since", help="Created at or after (ISO 8601).")
    ] = None,
    until: Annotated[
        datetime | None, typer.Option("--until", help="Created before (ISO 8601).")
    ] = None,
    uuid: Annotated[
        list[str] | None, typer.Option("--uuid", help="Only these conversations (repeatable).")
    ] = None,
    tag: Annotated[
        str | None, typer.Option("--tag", help="Only conversations with this tag.")
    ] = None,
    sample: Annotated[int | None, typer.Option("--sample", help="At most N, at random.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="The sample's random seed.")] = None,
    description: Annotated[str, typer.Option("--description", help="Free text.")] = "",
) -> None:
    """Create a dataset, empty or from recorded conversations (erased users' never)."""
    state: CliState = ctx.obj
    from pilothouse.types import ProcessStatus

    try:
        chosen = None if status == "any" else ProcessStatus(status)
    except ValueError:
        codes = ", ".join(s.value for s in ProcessStatus)
        fail(f"--status {status!r}: one of {codes} or any")

    async def body() -> DatasetInfo:
        async with open_facade(state) as ph:
            return await ph.evaluation.create_dataset(
                name,
                description=description,
                from_conversations=from_conversations,
                action=action,
                agent=agent,
                status=chosen,
                since=since,
                until=until,
                uuids=uuid,
                tag=tag,
                sample=sample,
                seed=seed,
            )

    _show(run(body))


@app.command(name="list")
def list_datasets(ctx: typer.Context) -> None:
    """List the tenant's datasets."""
    state: CliState = ctx.obj

    async def body() -> list[DatasetInfo]:
        async with open_facade(state) as ph:
            return await ph.evaluation.list_datasets()

    for info in run(body):
        _show(info)


@app.command()
def export(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The dataset.")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="JSONL file.")] = None,
) -> None:
    """Write a dataset as JSONL, one case per line (stdout by default)."""
    state: CliState = ctx.obj

    async def body() -> list[dict[str, Any]]:
        async with open_facade(state) as ph:
            return await ph.evaluation.export_dataset(name)

    text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in run(body))
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")


@app.command(name="import")
def import_dataset(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The new dataset's name.")],
    source: Annotated[Path, typer.Argument(help="JSONL file of cases.")],
    description: Annotated[str, typer.Option("--description", help="Free text.")] = "",
) -> None:
    """Create a dataset from a JSONL file (an export, or cases written by hand)."""
    state: CliState = ctx.obj
    lines: list[dict[str, Any]] = []
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        fail(f"cannot read {str(source)!r} ({exc.strerror})")
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            fail(f"{source}:{number}: not JSON ({exc})")
        if not isinstance(value, dict):
            fail(f"{source}:{number}: a case is a JSON object")
        lines.append(cast(dict[str, Any], value))

    async def body() -> DatasetInfo:
        async with open_facade(state) as ph:
            return await ph.evaluation.import_dataset(name, lines, description=description)

    _show(run(body))


@app.command()
def delete(ctx: typer.Context, name: Annotated[str, typer.Argument(help="The dataset.")]) -> None:
    """Delete a dataset and its cases."""
    state: CliState = ctx.obj

    async def body() -> None:
        async with open_facade(state) as ph:
            await ph.evaluation.delete_dataset(name)

    run(body)


def replay(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Argument(help="The dataset to replay.")],
    model: Annotated[str | None, typer.Option("--model", help="A catalog model code.")] = None,
    configuration: Annotated[
        str | None, typer.Option("--configuration", help="A catalog configuration code.")
    ] = None,
    settings: Annotated[
        list[str] | None, typer.Option("--set", help="Runtime config key=value.")
    ] = None,
    live_tools: Annotated[
        list[str] | None,
        typer.Option(
            "--live-tools",
            help="A read-only tool (settings.read_only: true) that runs live when a call does "
            "not match.",
        ),
    ] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Cases at once.")] = 1,
    run_name: Annotated[
        str | None, typer.Option("--run", help="The run's name; an unfinished run resumes.")
    ] = None,
    count_budgets: Annotated[
        bool, typer.Option("--count-budgets", help="Hold the replay's calls on budgets.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run as JSON.")] = False,
) -> None:
    """Replay a dataset's cases through the run loop against another target."""
    state: CliState = ctx.obj
    config = parse_assignments(settings or [], "--set")

    async def body() -> ReplayRun:
        async with open_facade(state) as ph:
            return await ph.evaluation.replay(
                dataset,
                run=run_name,
                model=model,
                configuration=configuration,
                settings=config or None,
                live_tools=live_tools or (),
                concurrency=concurrency,
                count_budgets=count_budgets,
            )

    result = run(body)
    if as_json:
        from dataclasses import asdict

        typer.echo(json.dumps(asdict(result), indent=2, default=str))
        return
    failed = sum(1 for r in result.results if r.status != "ok")
    diverged = sum(1 for r in result.results if r.divergences)
    typer.echo(f"{result.name}: {len(result.results)} cases, {failed} failed, {diverged} diverged")
    for r in result.results:
        for d in r.divergences:
            typer.echo(f"  case {r.sequence}: divergence {d['tool']} {json.dumps(d['arguments'])}")


def eval_run(
    ctx: typer.Context,
    dataset: Annotated[str, typer.Argument(help="The dataset whose replay is scored.")],
    run_name: Annotated[
        str | None, typer.Option("--run", help="The run to score (default: the newest).")
    ] = None,
    against: Annotated[
        str | None, typer.Option("--against", help="A baseline run (default: the recording).")
    ] = None,
    scorer: Annotated[
        list[str] | None, typer.Option("--scorer", help="A scorer spec (repeatable).")
    ] = None,
    threshold: Annotated[
        list[str] | None,
        typer.Option("--threshold", help="SCORER=RATE: the lowest pass rate (0-1)."),
    ] = None,
    margin: Annotated[
        float | None, typer.Option("--margin", help="The most a pass rate may regress (0-1).")
    ] = None,
    output_format: Annotated[
        str, typer.Option("--format", help="table, markdown or json.")
    ] = "table",
    rubric: Annotated[
        str | None, typer.Option("--rubric", help="What judge:MODEL scorers grade by.")
    ] = None,
    scoring_concurrency: Annotated[
        int, typer.Option("--scoring-concurrency", help="Verdicts of judges awaited at once.")
    ] = 4,
) -> None:
    """Score a dataset's replay run; exit 1 when a threshold or the margin fails."""
    state: CliState = ctx.obj
    if output_format not in {"table", "markdown", "json"}:
        fail(f"--format {output_format!r}: one of table, markdown, json")
    limits: dict[str, float] = {}
    for pair in threshold or []:
        name, sep, raw = pair.rpartition("=")
        try:
            limits[name] = float(raw)
        except ValueError:
            fail(f"--threshold {pair!r}: expected SCORER=RATE")
        if not sep or not name:
            fail(f"--threshold {pair!r}: expected SCORER=RATE")

    async def body() -> EvalReport:
        async with open_facade(state) as ph:
            chosen = run_name
            if chosen is None:
                runs = [
                    r.name
                    for r in await ph.evaluation.list_runs()
                    if r.dataset == dataset and r.name != against
                ]
                if not runs:
                    fail(f"dataset {dataset!r} has no replay run to score")
                chosen = runs[0]
            return await ph.evaluation.evaluate(
                chosen,
                against=against,
                scorers=scorer or ["exact"],
                thresholds=limits,
                margin=margin,
                rubric=rubric,
                concurrency=scoring_concurrency,
            )

    report = run(body)
    if output_format == "json":
        typer.echo(json.dumps(report.as_json(), indent=2))
    elif output_format == "markdown":
        typer.echo(report.as_markdown(), nl=False)
    else:
        typer.echo(report.as_table(), nl=False)
    if not report.passed:
        raise typer.Exit(code=1)
