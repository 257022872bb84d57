"""The model half of a turn: the :class:`CallModel` and :class:`RunTools` steps.

:class:`TurnLoop` handles the two steps the turn alternates between once its
request is assembled. Calling the model offers the step's tools, asks for
structured output the way the model's profile and capabilities allow, and
reads the response: tool calls (repaired) lead to :class:`RunTools`, an
answer that breaks the output schema to another :class:`CallModel` with the
errors as feedback, anything else to an ending. Running tools executes one
round of calls and records it, then goes back to the model, or ends the turn
paused for answers or with calls for the caller.

The model's profile, never its provider, decides the quirks: a JSON grammar
for structured output, and tool results read back as text.
"""

from __future__ import annotations

__all__ = ["TurnLoop"]

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pydantic_ai.messages import ModelMessage, ModelResponse, ToolReturnPart
from pydantic_ai.models import Model, ModelRequestParameters

from pilothouse.catalog._enums import TimelineKind, ToolCallStatus
from pilothouse.errors import ProviderError
from pilothouse.providers import ModelFactory, ModelSpec, to_model_settings
from pilothouse.runtime._advisors import ContentBlocked
from pilothouse.runtime._budgets import BudgetDowngrade
from pilothouse.runtime._convert import parse_json_output, parse_response
from pilothouse.runtime._events import ToolCallFinished, ToolCallRequested
from pilothouse.runtime._modelcall import ModelCaller
from pilothouse.runtime._record import TurnRecorder
from pilothouse.runtime._repair import CallProblem, RepairedCall, repair_calls, used_call_ids
from pilothouse.runtime._replaytape import current_tape
from pilothouse.runtime._request import (
    feedback,
    forced_choice,
    grammar_output,
    request_parameters,
)
from pilothouse.runtime._telemetry import Telemetry
from pilothouse.runtime._toolexec import Authorizer, ToolExecutor
from pilothouse.runtime._toolset import ToolSet, ToolSource, offered_tools
from pilothouse.runtime._toolstep import (
    ToolResults,
    normalized_response,
    results_as_text,
    run_tool_step,
)
from pilothouse.runtime._turn import (
    Answered,
    Blocked,
    CallModel,
    Failed,
    ModelCalls,
    Paused,
    Returned,
    RunTools,
    Turn,
)
from pilothouse.store import NewEvent, TurnBatch
from pilothouse.tools._base import ToolDefinition as OfferedTool
from pilothouse.tools._base import ToolError

_UNSET_MAX_TOKENS = 4096

if TYPE_CHECKING:
    from pilothouse.runtime._budgets import BudgetGate, BudgetHold

ModelLookup = Callable[[str, str], Awaitable[ModelSpec]]
"""A tenant's catalog model by code, as a spec (secrets resolved)."""


class TurnLoop:
    """Runs the model steps of every tenant's turns (one per process).

    Args:
        models: builds and caches the pydantic-ai models.
        recorder: writes each round.
        telemetry: OpenTelemetry spans.
        sleep: how retries wait.
        tool_source: resolves catalog tools and MCP clients; asked for only
            when an action has such tools.
        model_override: a model used for every call instead of the catalog's.
        tool_timeout: default seconds a tool call may take.
        tool_concurrency: how many calls of one response run at once.
        max_tool_steps: tool rounds one turn may take before it fails.
        budgets: holds each call's worst case on the tenant's budgets before
            it is sent (None: no budgets are enforced).
        catalog_model: finds the model a ``downgrade`` budget switches to.
    """

    def __init__(
        self,
        *,
        models: ModelFactory,
        recorder: TurnRecorder,
        telemetry: Telemetry,
        sleep: Callable[[float], Awaitable[None]],
        tool_source: Callable[[], ToolSource],
        model_override: Model | None,
        tool_timeout: float,
        tool_concurrency: int,
        max_tool_steps: int,
        budgets: BudgetGate | None = None,
        catalog_model: ModelLookup | None = None,
    ) -> None:
        self._budgets = budgets
        self._catalog_model = catalog_model
        self._models = models
        self._recorder = recorder
        self._telemetry = telemetry
        self._tool_source = tool_source
        self._model_override = model_override
        self.model_override = model_override
        """The model every call uses instead of the catalog's (tests), or None."""
        self._tool_timeout = tool_timeout
        self._tool_concurrency = tool_concurrency
        self._max_tool_steps = max_tool_steps
        self._caller = ModelCaller(
            telemetry=telemetry, sleep=sleep, emit=recorder.emit, hub=recorder.hub
        )

    async def _calls(self, turn: Turn, authorizer: Authorizer | None) -> ModelCalls:
        """The model, settings and tool executor of the turn, from its first call on."""
        compiled = turn.compiled
        options = compiled.options.merged(turn.config.options)
        executor = ToolExecutor(
            authorizer=authorizer,
            rules=turn.config.overrides,
            timeout=self._tool_timeout,
            concurrency=self._tool_concurrency,
            telemetry=self._telemetry,
            action=compiled.action_code,
        )
        turn.repairs_left = turn.output_retries_left = compiled.retry_count
        return ModelCalls(
            model=self._model_override or await self._models.model(compiled.model, options),
            options=options,
            settings=to_model_settings(compiled.model, options),
            executor=executor,
        )

    async def _budgeted_call(
        self,
        turn: Turn,
        calls: ModelCalls,
        messages: list[ModelMessage],
        settings: Any,
        params: ModelRequestParameters,
    ) -> ModelResponse:
        """Call the model with its worst case held on the tenant's budgets meanwhile.

        Raises:
            BudgetExceededError: a budget would be crossed; nothing was sent.
        """
        hold: BudgetHold | None = None
        tape = current_tape()
        if self._budgets is not None and (tape is None or tape.count_budgets):
            # The configuration always sets max_tokens; a model override in
            # tests may not, and then a conservative output is held.
            max_tokens = calls.options.max_tokens or _UNSET_MAX_TOKENS
            hold = await self._budgets.hold(turn, messages, params, max_tokens)
        if hold is None or self._budgets is None:
            return await self._caller.call(
                turn, calls.model, messages, settings, params, calls.options
            )
        before = (turn.turn_cost, turn.turn_input, turn.turn_output)
        try:
            return await self._caller.call(
                turn, calls.model, messages, settings, params, calls.options
            )
        finally:
            # Settled even when the call was cancelled: what it consumed
            # (counted by the caller) is spent, the rest of the hold freed,
            # with the write that records it (the cancelled turn's too).
            await self._budgets.settle(
                turn,
                hold,
                turn.turn_cost - before[0],
                turn.turn_input - before[1],
                turn.turn_output - before[2],
            )

    async def _downgrade(self, turn: Turn, calls: ModelCalls, downgrade: BudgetDowngrade) -> None:
        """Switch the turn to the budget's cheaper model; the timeline keeps both."""
        assert self._catalog_model is not None, "checked by the caller"
        requested = turn.compiled.model.code
        if turn.requested_model is None:
            turn.requested_model = requested
        meter = self._telemetry.meter
        if meter is not None:
            meter.budget_downgrade(budget=downgrade.budget, model=downgrade.model)
        spec = await self._catalog_model(turn.tenant, downgrade.model)
        turn.compiled = replace(turn.compiled, model=spec)
        turn.calls = replace(
            calls,
            model=self._model_override or await self._models.model(spec, calls.options),
            settings=to_model_settings(spec, calls.options),
        )
        turn.pending.append(
            NewEvent(
                TimelineKind.BUDGET,
                {
                    "budget": downgrade.budget,
                    "downgraded": True,
                    "requested_model": requested,
                    "model": spec.code,
                    "limit": downgrade.limit,
                    "period": downgrade.period,
                    "scope": downgrade.scope,
                    "subject": downgrade.subject,
                },
            )
        )

    async def call_model(
        self, turn: Turn, step: CallModel, authorizer: Authorizer | None
    ) -> CallModel | RunTools | Answered | Failed | Blocked:
        """Call the model once; say what its response leads to.

        A ``downgrade`` budget at its limit switches the turn to its cheaper
        model first; the call is then worked out again for that model.
        """
        try:
            return await self._call_model(turn, step, authorizer)
        except BudgetDowngrade as downgrade:
            if self._catalog_model is None or turn.calls is None:
                return Failed(f"budget {downgrade.budget} downgrades, and no catalog is at hand")
            await self._downgrade(turn, turn.calls, downgrade)
        return await self._call_model(turn, step, authorizer)

    async def _call_model(
        self, turn: Turn, step: CallModel, authorizer: Authorizer | None
    ) -> CallModel | RunTools | Answered | Failed | Blocked:
        calls = turn.calls
        if calls is None:
            calls = turn.calls = await self._calls(turn, authorizer)
        compiled = turn.compiled
        try:
            toolset = await self._toolset(turn)
        except ToolError as exc:
            # A tool that cannot be built or an MCP server that cannot be
            # reached ends the turn with the reason, nothing lost.
            return Failed(f"tools unavailable: {exc}")
        # Offering no tools (rather than tool_choice "none", which small
        # local models read as a cue to write calls as text) makes the
        # model answer from the results it has.
        offered = (
            []
            if step.force_text
            else [d for d in toolset.definitions() if d.name not in step.withhold]
        )
        params, wrapped_list = request_parameters(compiled, offered)
        settings = calls.settings
        if compiled.output_schema is not None and compiled.model.profile.grammar_output:
            settings, wrapped_list = grammar_output(settings, compiled), compiled.is_list_output
        turn.offers_tools = bool(offered)
        if offered:
            try:
                settings = _tool_settings(turn, settings, offered, calls.model)
            except ValueError as exc:
                return Failed(str(exc))
        try:
            response = await self._budgeted_call(turn, calls, step.messages, settings, params)
        except ProviderError as error:
            # Description and suggestions (seed 001), for the record and the caller.
            return Failed(error.described())
        except ContentBlocked as blocked:
            return Blocked(blocked)
        parsed = parse_response(response)
        validators = toolset.validators.without(step.withhold)
        repaired, problems = repair_calls(
            parsed.tool_calls,
            parsed.text,
            validators,
            look_in_text=compiled.output_schema is None and bool(validators),
            wire_repairs=turn.wire_repairs,
            used_ids=used_call_ids(step.messages, turn.handle.memory)
            | {record.id for record in turn.records},
        )
        repaired, problems = _one_call(turn, repaired, problems)
        if repaired or problems:
            turn.tool_rounds += 1
            if turn.tool_rounds > self._max_tool_steps:
                return Failed(
                    f"the model made more than {self._max_tool_steps} rounds of tool calls"
                )
            if problems and not repaired:
                turn.repairs_left -= 1
                if turn.repairs_left < 0:
                    detail = "; ".join(p.message for p in problems)
                    return Failed(f"tool calls could not be repaired: {detail}")
            return RunTools(step.messages, response, parsed.text, repaired, problems, toolset)
        if compiled.output_schema is None:
            return Answered(response, parsed, parsed.text)
        value, problem = parse_json_output(parsed, wrapped_list)
        errors = [problem] if problem else compiled.validation_errors(value)
        if not errors:
            return Answered(response, parsed, value)
        await self._recorder.invalid_output(turn, response, parsed, errors)
        if turn.output_retries_left <= 0:
            return Failed("output does not match the schema: " + "; ".join(errors))
        turn.output_retries_left -= 1
        attempt = compiled.retry_count - turn.output_retries_left
        messages = [*step.messages, response, feedback(errors, parsed, attempt)]
        return CallModel(messages, step.force_text)

    async def run_tools(self, turn: Turn, step: RunTools) -> CallModel | Paused | Returned | Failed:
        """Run one round of tool calls and record it; say where the turn goes next."""
        assert turn.calls is not None, "tools run after a model call"
        response = normalized_response(step.response, step.calls, step.problems)
        # Announced before they run, so a listener shows each call as it
        # starts and its result (ToolCallFinished) when it comes.
        for call in step.calls:
            await self._recorder.emit(
                turn, ToolCallRequested(turn.uuid, call.call_id, call.name, call.arguments)
            )
        text = "" if any(c.from_text for c in step.calls) else step.text
        marker = self._recorder.marker(turn, response)

        def interrupted(batch: TurnBatch) -> None:
            # Written with the cancelled turn's TE (see TurnRecorder).
            turn.interrupted = batch

        outcome = await run_tool_step(
            tenant=turn.tenant,
            conversation_uuid=turn.uuid,
            response=response,
            text=text,
            calls=step.calls,
            problems=step.problems,
            toolset=step.toolset,
            executor=turn.calls.executor,
            skills=turn.compiled.skills,
            marker=marker,
            records=turn.records,
            interrupted=interrupted,
        )
        if isinstance(outcome, ToolResults):
            turn.active_skills.update(outcome.activated)
        if not isinstance(outcome, ToolResults):
            return outcome
        for part in outcome.request.parts:
            if isinstance(part, ToolReturnPart):
                await self._recorder.emit(
                    turn,
                    ToolCallFinished(
                        turn.uuid, part.tool_call_id, part.tool_name, part.model_response_str()
                    ),
                )
        await self._recorder.step(turn, outcome.batch)
        if turn.config.fail_on_denied:
            # Vantiq: "If denied, tool execution fails" (the call fails with
            # io.vantiq.llm.function.exec.denied): the turn ends FA, recorded.
            denied = [o for o in outcome.batch.outcomes if o.status is ToolCallStatus.DENIED]
            if denied:
                return Failed(denied[0].result)
        if turn.compiled.model.profile.tool_results_as_text:
            # One tool round, then the results as plain text with no tools
            # offered: what small models answer well from.
            return CallModel([*step.messages, results_as_text(outcome.request)], True)
        # A model asking again for results it already has is stuck: the next
        # request lets it answer only in text.
        return CallModel([*step.messages, response, outcome.request], outcome.only_repeats)

    async def _toolset(self, turn: Turn) -> ToolSet:
        compiled = turn.compiled
        needs_source = bool(
            compiled.tool_rows or compiled.mcp_clients or any(s.tools for s in compiled.skills)
        )
        source = self._tool_source() if needs_source else None
        return await offered_tools(
            source, compiled, turn.active_skills, self._tool_timeout, turn.skill_offer
        )


def _tool_settings(turn: Turn, settings: Any, offered: Sequence[OfferedTool], model: Model) -> Any:
    """The call's settings with the caller's tool choice and parallel calls switch.

    Raises:
        ValueError: the forced choice cannot be sent (see ``forced_choice``).
    """
    if turn.config.tool_choice and turn.tool_rounds == 0:
        # The caller's forced choice binds the turn's first call only: after
        # a round of the action's own tools the model answers from their
        # results (forcing again would loop until the step limit).
        settings = {
            **settings,
            "tool_choice": forced_choice(turn.config.tool_choice, offered, model),
        }
    if (
        not turn.config.parallel_tool_calls
        and turn.compiled.model.profile.takes_parallel_tool_calls
    ):
        settings = {**settings, "parallel_tool_calls": False}
    return settings


def _one_call(
    turn: Turn, repaired: list[RepairedCall], problems: list[CallProblem]
) -> tuple[list[RepairedCall], list[CallProblem]]:
    # One call per answer was asked for: the first is kept, as a provider
    # that honours the setting would have made only it.
    if turn.config.parallel_tool_calls:
        return repaired, problems
    if repaired:
        return repaired[:1], []
    return [], problems[:1]
