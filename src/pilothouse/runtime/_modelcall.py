"""One model call of a turn: advisors, retries, streaming, usage and its audit.

The advisor chain wraps the whole call, retries included, so a cache or a
filter acts once per call; inside it each attempt is an audit event, a
failed attempt backs off and tries again, and a streamed answer reaches the
turn's listeners delta by delta.
"""

from __future__ import annotations

__all__ = ["ModelCaller"]

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields, replace
from typing import Any

import anyio
from pydantic_ai.direct import model_request, model_request_stream
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse

from pilothouse._sendgate import before_send
from pilothouse.catalog._enums import ModelCapability, TimelineKind
from pilothouse.errors import ContentFilterError
from pilothouse.memory import counter_for
from pilothouse.providers import redact, secret_values, translate_error, wire_notes
from pilothouse.runtime._advisors import AdvisedCall, ContentBlocked
from pilothouse.runtime._convert import estimate_usage
from pilothouse.runtime._events import EventHub, TextDelta, ThinkingDelta, TurnEvent, TurnRetry
from pilothouse.runtime._request import delta_text
from pilothouse.runtime._retry import RetryPolicy
from pilothouse.runtime._telemetry import Telemetry
from pilothouse.runtime._turn import Turn
from pilothouse.store import NewEvent


def options_for_audit(options: Any) -> dict[str, Any]:
    """The options that are set, for the audit record."""
    # Shallow on purpose: asdict() deep-copies every value on every call.
    values = ((f.name, getattr(options, f.name)) for f in fields(options))
    return {name: value for name, value in values if value is not None}


def switched_model(turn: Turn) -> str | None:
    """The model a budget switched ``turn`` to, named on its deltas; None when it did not."""
    return turn.compiled.model.code if turn.requested_model is not None else None


def _first_token_ms(first_token: list[float], started: float) -> dict[str, float]:
    """``{"first_token_ms": ...}`` for a call whose stream sent a token, else nothing."""
    return {"first_token_ms": round((first_token[0] - started) * 1000, 1)} if first_token else {}


@dataclass
class ModelCaller:
    """Calls the model for a turn.

    Attributes:
        telemetry: OpenTelemetry spans.
        sleep: how retries wait.
        emit: delivers a turn event to the turn's listeners.
        hub: tells whether a subscriber wants a conversation's streamed deltas.
    """

    telemetry: Telemetry
    sleep: Callable[[float], Awaitable[None]]
    emit: Callable[[Turn, TurnEvent], Awaitable[None]]
    hub: EventHub

    async def call(
        self,
        turn: Turn,
        model: Model,
        messages: list[ModelMessage],
        settings: Any,
        params: ModelRequestParameters,
        options: Any,
    ) -> ModelResponse:
        """Call the model through the action's advisors.

        Raises:
            ProviderError: the provider failed and retries are spent.
            ContentBlocked: a content filter advisor, or the provider's own filter,
                refused input or output.
        """
        # The text streamed by an earlier call of the turn is in that call's
        # own message already (an answer that called tools, an invalid
        # structured answer): what a cancel or a failure records as streamed
        # is this call's text alone.
        turn.partial.clear()
        chain = turn.compiled.advisors
        if not chain:
            return await self._attempts(turn, model, messages, settings, params, options)
        advised = AdvisedCall(
            conversation_uuid=turn.handle.uuid,
            tenant=turn.tenant,
            spec=turn.compiled.model,
            messages=messages,
            settings=settings,
            parameters=params,
            streaming=self.wants_stream(turn),
        )

        async def terminal(current: AdvisedCall) -> ModelResponse:
            return await self._attempts(
                turn, model, current.messages, current.settings, current.parameters, options
            )

        response = await chain.call(advised, terminal)
        if advised.notes.get("cache") == "hit":
            # A cached answer was not paid for again: no usage, and listeners
            # of a streamed call get it in one piece.
            turn.pending.append(
                NewEvent(TimelineKind.RESPONSE, {"cache": "hit", "model": response.model_name})
            )
            text = "".join(
                getattr(p, "content", "") for p in response.parts if p.part_kind == "text"
            )
            if advised.streaming and text:
                turn.partial.append(text)
                await self.emit(turn, TextDelta(turn.handle.uuid, text, model=switched_model(turn)))
        elif advised.notes:
            turn.pending.append(NewEvent(TimelineKind.RESPONSE, {"advisors": advised.notes}))
        return response

    async def _attempts(
        self,
        turn: Turn,
        model: Model,
        messages: list[ModelMessage],
        settings: Any,
        params: ModelRequestParameters,
        options: Any,
    ) -> ModelResponse:
        spec = turn.compiled.model
        policy = RetryPolicy(turn.compiled.retry_count, turn.compiled.retry_delay)
        stream = self.wants_stream(turn)
        audited_options = options_for_audit(options)
        meter = self.telemetry.meter
        attempt = 0
        while True:
            attempt += 1
            started = time.perf_counter()
            first_token: list[float] = []
            # The stream in flight and where this call's text starts in
            # turn.partial: what a cancel counts as consumed.
            streams: list[StreamedResponse] = []
            partial_from = len(turn.partial)
            turn.pending.append(
                NewEvent(
                    TimelineKind.REQUEST,
                    {
                        "attempt": attempt,
                        "provider": spec.provider.code,
                        "model": spec.model_name,
                        "messages": len(messages),
                        "stream": stream,
                        "options": audited_options,
                    },
                )
            )
            if not getattr(model, "waits_at_send_gate", False):
                # A model that does not wait itself, right before its bytes
                # leave, waits here for the turn's start record.
                await before_send()
            try:
                with (
                    wire_notes() as notes,
                    self.telemetry.model_call(
                        spec.provider.kind, spec.model_name, audited_options
                    ) as span,
                ):
                    if stream:
                        response = await self._stream(
                            turn, model, messages, settings, params, first_token, streams
                        )
                    else:
                        response = await model_request(
                            model,
                            messages,
                            model_settings=settings,
                            model_request_parameters=params,
                        )
                    span.record_response(
                        response.model_name,
                        response.provider_response_id,
                        [response.finish_reason] if response.finish_reason else [],
                        response.usage.input_tokens,
                        response.usage.output_tokens,
                    )
            except anyio.get_cancelled_exc_class():
                # Stopped mid-call (a caller's cancel, the shutdown): the
                # provider already read the prompt and wrote the text streamed
                # so far, which a paid provider bills; the turn counts it.
                self._count_interrupted(
                    turn,
                    messages,
                    streams,
                    "".join(turn.partial[partial_from:]),
                    attempt,
                    (started, first_token),
                )
                raise
            except Exception as exc:
                # The resolved key and header values are masked wherever a
                # vendor's message quotes them back.
                error = translate_error(exc, secrets=secret_values(spec))
                if error is None:
                    raise
                seconds = time.perf_counter() - started
                elapsed = round(seconds * 1000, 1)
                if meter is not None:
                    meter.model_call(
                        provider=spec.provider.code,
                        model=spec.model_name,
                        action=turn.compiled.action_code,
                        status=type(error).__name__,
                        seconds=seconds,
                        first_token_seconds=first_token[0] - started if first_token else None,
                    )
                # A stream that opened before it broke had its prompt read and
                # its text so far written, which a paid provider bills, as a
                # cancelled call's: the turn counts it. A call refused before
                # its stream opened (a 5xx, a refused connection) generated
                # nothing and counts nothing.
                used = (
                    self._count_partial(
                        turn, messages, streams, "".join(turn.partial[partial_from:])
                    )
                    if streams
                    else {}
                )
                turn.pending.append(
                    NewEvent(
                        TimelineKind.ERROR,
                        {
                            "attempt": attempt,
                            "error": type(error).__name__,
                            "detail": redact(str(error), secret_values(spec)),
                            "ms": elapsed,
                            # What listeners already saw of the failed attempt:
                            # the record holds every text a client was sent.
                            **({"streamed": "".join(turn.partial)} if turn.partial else {}),
                            **used,
                        },
                    )
                )
                if isinstance(error, ContentFilterError):
                    # The provider's filter refused the prompt: the turn ends
                    # CF, as an answer with finish_reason=content_filter does.
                    raise ContentBlocked("input", "the provider's content filter") from exc
                if not policy.should_retry(error, attempt):
                    raise error from exc
                delay = policy.delay_for(error, attempt)
                if meter is not None:
                    meter.retry(
                        provider=spec.provider.code,
                        model=spec.model_name,
                        action=turn.compiled.action_code,
                        error=type(error).__name__,
                    )
                turn.pending.append(
                    NewEvent(TimelineKind.RETRY, {"attempt": attempt + 1, "delay": delay})
                )
                turn.partial.clear()
                await self.emit(
                    turn, TurnRetry(turn.handle.uuid, attempt + 1, delay, type(error).__name__)
                )
                await self.sleep(delay)
                continue
            seconds = time.perf_counter() - started
            if meter is not None:
                meter.model_call(
                    provider=spec.provider.code,
                    model=spec.model_name,
                    action=turn.compiled.action_code,
                    status="ok",
                    seconds=seconds,
                    first_token_seconds=first_token[0] - started if first_token else None,
                )
            estimated = response.usage.input_tokens == 0 and response.usage.output_tokens == 0
            if estimated:
                # Some servers (llama.cpp among them) report no usage for a
                # streamed call; count it ourselves and say so in the audit.
                response.usage = estimate_usage(
                    messages, response, counter_for(spec.provider.kind, spec.model_name)
                )
                turn.usage_estimated = True
            turn.add_usage(response)
            turn.wire_repairs = notes.repairs
            turn.pending.append(
                NewEvent(
                    TimelineKind.RESPONSE,
                    {
                        "attempt": attempt,
                        "usage_estimated": estimated,
                        "model": response.model_name,
                        "response_id": response.provider_response_id,
                        "finish_reason": response.finish_reason,
                        "input_tokens": response.usage.input_tokens,
                        "output_tokens": response.usage.output_tokens,
                        "ms": round(seconds * 1000, 1),
                        # A streamed call's time to its first token.
                        **_first_token_ms(first_token, started),
                        **({"wire_repairs": notes.repairs} if notes.repairs else {}),
                    },
                )
            )
            return response

    def _count_interrupted(
        self,
        turn: Turn,
        messages: list[ModelMessage],
        streams: list[StreamedResponse],
        text: str,
        attempt: int,
        timing: tuple[float, list[float]],
    ) -> None:
        """Count the usage of a call stopped before its answer was complete.

        Writes the call's ``response`` event, marked ``interrupted``.
        Synchronous on purpose: it runs while the turn is being cancelled,
        where nothing may wait.
        """
        started, first_token = timing
        used = self._count_partial(turn, messages, streams, text)
        turn.partial_tokens = used["output_tokens"]
        turn.pending.append(
            NewEvent(
                TimelineKind.RESPONSE,
                {
                    "attempt": attempt,
                    "interrupted": True,
                    **used,
                    "ms": round((time.perf_counter() - started) * 1000, 1),
                    **_first_token_ms(first_token, started),
                },
            )
        )

    def _count_partial(
        self,
        turn: Turn,
        messages: list[ModelMessage],
        streams: list[StreamedResponse],
        text: str,
    ) -> dict[str, Any]:
        """Count for the turn the usage of a call that ended without its answer.

        The provider's own figures when its stream already reported them,
        otherwise an estimate from the prompt and ``text`` (the answer
        streamed so far), marked ``usage_estimated`` in the turn's usage.

        Returns:
            The figures for the call's audit event: ``usage_estimated``,
            ``model``, ``input_tokens`` and ``output_tokens``.
        """
        spec = turn.compiled.model
        answered_by = streams[0].model_name if streams else None
        turn.answered_by = answered_by or turn.answered_by
        response = ModelResponse(parts=[TextPart(text)] if text else [], model_name=answered_by)
        estimate = estimate_usage(
            messages, response, counter_for(spec.provider.kind, spec.model_name)
        )
        reported = streams[0].usage if streams else None
        if reported is None:
            response.usage = estimate
        else:
            # What the stream reported so far, each count it lacks estimated
            # (most providers send usage only with their last chunk).
            response.usage = replace(
                reported,
                input_tokens=reported.input_tokens or estimate.input_tokens,
                output_tokens=reported.output_tokens or estimate.output_tokens,
            )
        estimated = reported is None or (
            (response.usage.input_tokens, response.usage.output_tokens)
            != (reported.input_tokens, reported.output_tokens)
        )
        turn.usage_estimated = turn.usage_estimated or estimated
        turn.add_usage(response)
        return {
            "usage_estimated": estimated,
            "model": response.model_name,
            "input_tokens": response.usage.input_tokens,
            "output_tokens": response.usage.output_tokens,
        }

    def wants_stream(self, turn: Turn) -> bool:
        spec = turn.compiled.model
        if turn.offers_tools and not spec.profile.streams_with_tools:
            return False
        if turn.config.stream is not None:
            return turn.config.stream
        if ModelCapability.STREAMING not in spec.capabilities:
            return False
        return turn.listener is not None or self.hub.wants_deltas(turn.uuid, turn.tenant)

    async def _stream(
        self,
        turn: Turn,
        model: Model,
        messages: list[ModelMessage],
        settings: Any,
        params: ModelRequestParameters,
        first_token: list[float],
        streams: list[StreamedResponse],
    ) -> ModelResponse:
        """Stream one attempt to the listeners.

        ``first_token`` gets the first token's time, ``streams`` the stream
        once it is open (its usage so far counts if the call is stopped).
        """
        uuid, switched = turn.handle.uuid, switched_model(turn)
        async with model_request_stream(
            model, messages, model_settings=settings, model_request_parameters=params
        ) as stream:
            streams.append(stream)
            async for event in stream:
                text, thinking = delta_text(event)
                if not first_token and (text or thinking):
                    first_token.append(time.perf_counter())
                if text:
                    turn.partial.append(text)
                    await self.emit(turn, TextDelta(uuid, text, model=switched))
                elif thinking:
                    await self.emit(turn, ThinkingDelta(uuid, thinking, model=switched))
            return stream.get()
