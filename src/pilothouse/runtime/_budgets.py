"""Budgets enforced before a model call: hold the worst case, settle to what was used.

Before each model call the gate finds the tenant's budgets that apply to it
(scope, match, model and provider filters), works out the call's worst case
(the prompt's tokens counted offline, the call's ``max_tokens`` as output,
both priced with the model's prices) and holds it on each budget's ledger row
for the current period with one conditional ``UPDATE``: the row changes only
if spent + held + this call stays within every limit. A refused hold rolls
back every hold of the call and raises :class:`~pilothouse.errors.BudgetExceededError`
before any request leaves (a ``downgrade`` budget raises :class:`BudgetDowngrade`
instead, and the turn switches to the budget's cheaper model, on which that
budget never stops it). After the call the hold is settled to the usage
the turn recorded (a cancelled call at what it consumed), so a limit is
overshot by at most what one in-flight call used beyond its own estimate.

Because the hold is a single statement, it is atomic on SQLite (one writer)
and on PostgreSQL (it locks its rows, in the budgets' order, before it
works out their room), across workers and replicas alike. A period is a
key computed from the clock in the budget's time zone (``2026-12`` for a
month), so every process moves to the next period's row at the same boundary
and the old row is simply no longer written.

Each threshold crossing is announced once per period: the process whose
``UPDATE ... WHERE alerted < threshold`` changes the row logs a warning and
adds a ``budget`` event to the turn's timeline.
"""

from __future__ import annotations

__all__ = [
    "BudgetDowngrade",
    "BudgetGate",
    "BudgetHold",
    "BudgetRule",
    "fraction",
    "load_rules",
    "period_of",
]

import json
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from time import monotonic
from typing import Any

import anyio
from pydantic_ai.messages import BaseToolCallPart, ModelMessage
from pydantic_ai.models import ModelRequestParameters
from sqlalchemy import (
    Connection,
    select,
)

from pilothouse.catalog._enums import TimelineKind
from pilothouse.errors import BudgetExceededError
from pilothouse.memory import counter_for
from pilothouse.runtime._budgetalerts import AlertNotifier
from pilothouse.runtime._budgetledger import (
    BudgetHold,
    BudgetRule,
    LedgerEntry,
    LedgerStatements,
    Refused,
    fits_once_settled,
    fixed_values,
    fraction,
    hold_at_once,
    hold_rows,
    hold_update,
    limit_crossed,
    load_rules,
    period_of,
    refused_by,
    settle_rows,
    settle_update,
)
from pilothouse.runtime._budgetredis import RedisLedger
from pilothouse.runtime._meter import Meter
from pilothouse.runtime._turn import Turn
from pilothouse.store import NewEvent
from pilothouse.store._engine import Database
from pilothouse.store._tables import conversation_table

logger = logging.getLogger(__name__)

_MILLION = Decimal(1_000_000)
# Per message, as the usage estimate counts it: role and framing tokens.
_MESSAGE_OVERHEAD = 4
# How many callers' charged rows the gate keeps worked out.
_CHARGED_KEPT = 4096


class BudgetDowngrade(Exception):
    """A ``downgrade`` budget is at its limit: the call goes to ``model`` instead.

    Raised by :meth:`BudgetGate.hold` before anything was held or sent.

    Attributes:
        budget: the budget's code.
        model: the code of the model to use instead.
        scope: the budget's scope.
        subject: whose counters reached the limit.
        period: the period key.
        limit: the limit that would be crossed.
    """

    def __init__(
        self, budget: str, model: str, scope: str, subject: str, period: str, limit: str
    ) -> None:
        super().__init__(f"budget {budget} reached its {limit} limit: downgrade to {model}")
        self.budget = budget
        self.model = model
        self.scope = scope
        self.subject = subject
        self.period = period
        self.limit = limit


class BudgetGate:
    """Holds each model call's worst case on the tenant's budgets, and settles it.

    One per runtime; the budgets are read once per tenant and catalog revision.

    Args:
        database: the store the ledger is in.
        clock: the current time (aware); tests move it across a period boundary.
        wait: seconds a call waits for other calls' holds to settle when only
            they stand between it and the limit (a burst), before it is refused.
        meter: the metrics system's meter, which counts each alert.
        notifiers: where each alert also goes (a webhook, a bus).
        redis: the deployment's Redis ledger, which then holds and settles
            instead of the database (see :mod:`pilothouse.runtime._budgetredis`).
    """

    def __init__(
        self,
        database: Database,
        *,
        clock: Callable[[], datetime] | None = None,
        wait: float = 30.0,
        meter: Callable[[], Meter | None] = lambda: None,
        notifiers: Sequence[AlertNotifier] = (),
        redis: RedisLedger | None = None,
    ) -> None:
        self._redis = redis
        self._meter = meter
        self._notifiers = tuple(notifiers)
        self._database = database
        self._clock = clock or (lambda: datetime.now(UTC))
        self._wait = wait
        self._sql = LedgerStatements()
        self._rules: dict[str, tuple[int, tuple[BudgetRule, ...], frozenset[str]]] = {}
        """Each tenant's budgets at a catalog revision, and the scopes they have."""
        self._charged: dict[
            tuple[Any, ...], tuple[datetime, datetime | None, tuple[LedgerEntry, ...]]
        ] = {}
        """The rows calls are charged to, by who calls, until the first period ends."""

    @property
    def in_redis(self) -> bool:
        """Whether holds and settles go to the deployment's Redis, not the database."""
        return self._redis is not None

    def _entries(
        self,
        rules: Sequence[BudgetRule],
        scopes: frozenset[str],
        turn: Turn,
        key_prefix: str | None,
        now: datetime,
    ) -> tuple[LedgerEntry, ...]:
        """The ledger rows a call of ``turn`` is charged to, now (worked out once per period).

        ``scopes``: what ``rules`` are scoped to (worked out once with them).
        """
        compiled = turn.compiled
        # Only what some budget is scoped to tells callers apart: a user's
        # conversation of its own is a new caller per conversation otherwise.
        who = (
            turn.tenant,
            turn.handle.catalog_revision,
            compiled.model.code,
            compiled.model.provider.code,
            key_prefix if "api_key" in scopes else None,
            compiled.agent_code if "agent" in scopes else None,
            compiled.action_code if "action" in scopes else None,
            turn.handle.memory_id if "user" in scopes else None,
        )
        cached = self._charged.get(who)
        if cached is not None:
            since, ends, entries = cached
            if since <= now and (ends is None or now < ends):
                return entries
        entries = tuple(_entries(rules, turn, key_prefix, now))
        ends = min((e.resets_at for e in entries if e.resets_at is not None), default=None)
        if len(self._charged) >= _CHARGED_KEPT:
            # Many callers (users, keys): start again rather than grow without bound.
            self._charged.clear()
        self._charged[who] = (now, ends, entries)
        return entries

    async def rules(self, tenant: str, revision: int) -> tuple[BudgetRule, ...]:
        """The tenant's active budgets at a catalog revision."""
        cached = self._rules.get(tenant)
        if cached is not None and cached[0] == revision:
            return cached[1]
        rules = await self._database.transaction(load_rules, tenant)
        self._rules[tenant] = (revision, rules, frozenset(rule.scope for rule in rules))
        return rules

    async def _hold(
        self,
        sql: LedgerStatements,
        tenant: str,
        entries: Sequence[LedgerEntry],
        money: Decimal,
        input_tokens: int,
        output_tokens: int,
        turns: int,
    ) -> None:
        """Hold on every row in one transaction, or raise :class:`Refused`."""
        amounts = (sql, tenant, entries, money, input_tokens, output_tokens, turns)
        if self._redis is not None:
            refused = await self._redis.hold(
                tenant,
                [(e.rule, e.subject, e.period, e.resets_at, e.enforced) for e in entries],
                money,
                input_tokens,
                output_tokens,
                turns,
                self._clock(),
            )
            if refused is not None:
                index, row = refused
                entry = entries[index]
                raise refused_by(entry, row, money, input_tokens, output_tokens, turns)
            return
        # One statement for all rows, committed on its own, in the common
        # case; row by row when a row is missing or a limit is in the way.
        if await self._database.statement(hold_at_once, *amounts):
            return
        await self._database.transaction(hold_rows, *amounts)

    async def _hold_with_start(self, turn: Turn, amounts: tuple[Any, ...]) -> bool:
        """Hold in the transaction of the turn's held-back start; say whether it held.

        The start commits either way: when the hold does not take (a
        period's first call, a limit in the way), the gate holds as for any
        call, on a conversation already recorded.
        """
        assert turn.start_with is not None, "checked by the caller"
        entries: Sequence[LedgerEntry] = amounts[2]
        if self._redis is not None:
            # Nothing to carry: the hold is a Redis script.
            await turn.start_with(None)
            return False
        if not self._database.is_sqlite:
            # One UPDATE the start's own statement carries (PostgreSQL).
            update = hold_update(*amounts)
            return await turn.start_with(update) and update.matched == [len(entries)]
        held: list[bool] = []

        def work(connection: Connection) -> None:
            held.append(hold_at_once(connection, *amounts))

        return await turn.start_with(work) and held == [True]

    async def _fits_later(
        self,
        sql: LedgerStatements,
        tenant: str,
        entries: Sequence[LedgerEntry],
        money: Decimal,
        input_tokens: int,
        output_tokens: int,
        turns: int,
    ) -> bool | None:
        """Whether the call fits now (True), only once holds settle (False), or never (None)."""
        if self._redis is None:
            return await self._database.transaction(
                fits_once_settled, sql, tenant, entries, money, input_tokens, output_tokens, turns
            )
        now_fits = True
        for entry in entries:
            if not entry.enforced:
                continue
            row = await self._redis.read(tenant, entry.rule.code, entry.period, entry.subject)
            if row is None:
                continue
            amounts = (row, entry.rule, money, input_tokens, output_tokens, turns)
            if limit_crossed(*amounts, held=False) is not None:
                return None
            if limit_crossed(*amounts, held=True) is not None:
                now_fits = False
        return now_fits

    async def _applying(self, turn: Turn, now: datetime) -> tuple[LedgerEntry, ...]:
        """The ledger rows a call of ``turn`` is charged to now (none: no budget applies)."""
        # Once a tenant's budgets are read, each call finds them with no await.
        cached = self._rules.get(turn.tenant)
        if cached is None or cached[0] != turn.handle.catalog_revision:
            await self.rules(turn.tenant, turn.handle.catalog_revision)
            cached = self._rules[turn.tenant]
        _, rules, scopes = cached
        if not rules:
            return ()
        key_prefix = turn.key_prefix
        # A conversation not yet written (its start held back: id 0) is new,
        # and a new conversation's key is the request's: nothing to read.
        if key_prefix is None and "api_key" in scopes and turn.handle.conversation_id:
            key_prefix = turn.key_prefix = await self._database.transaction(
                _conversation_key, turn.handle.conversation_id
            )
        return self._entries(rules, scopes, turn, key_prefix, now)

    async def hold(
        self,
        turn: Turn,
        messages: Sequence[ModelMessage],
        params: ModelRequestParameters,
        max_tokens: int,
    ) -> BudgetHold | None:
        """Hold the call's worst case on every budget that applies, or refuse it.

        Args:
            turn: the turn about to call its model.
            messages: what the call sends.
            params: the tools the call offers (their schemas are input too).
            max_tokens: the most the call may generate.

        Returns:
            The hold to settle after the call; None when no budget applies.

        Raises:
            BudgetExceededError: a budget that refuses would be crossed.
        """
        now = self._clock()
        entries = await self._applying(turn, now)
        if not entries:
            return None
        spec = turn.compiled.model
        input_tokens = _prompt_tokens(turn, messages, params)
        money = Decimal(0)
        if spec.input_price is not None:
            money += Decimal(input_tokens) * spec.input_price / _MILLION
        if spec.output_price is not None:
            money += Decimal(max_tokens) * spec.output_price / _MILLION
        turns = 0 if turn.budget_counted else 1
        amounts = (self._sql, turn.tenant, entries, money, input_tokens, max_tokens, turns)
        if turn.start_with is not None and await self._hold_with_start(turn, amounts):
            turn.budget_counted = True
            return BudgetHold(turn.tenant, entries, money, input_tokens, max_tokens)
        deadline = monotonic() + self._wait
        pause = 0.02
        while True:
            try:
                await self._hold(*amounts)
                break
            except Refused as refused:
                rule = refused.entry.rule
                if rule.on_limit == "downgrade" and rule.downgrade_to is not None:
                    # At (or, with calls in flight, near) the limit: switch
                    # now rather than wait for the holds to settle.
                    entry = refused.entry
                    raise BudgetDowngrade(
                        rule.code,
                        rule.downgrade_to,
                        rule.scope,
                        entry.subject,
                        entry.period,
                        refused.limit,
                    ) from None
                # A burst: the spent amount leaves room, only calls in flight
                # hold it. They settle below their holds, so wait for them;
                # a call that cannot fit on what is spent is refused at once.
                if not refused.in_flight:
                    raise _refusal(refused, now) from None
                last = refused
            # Wait with plain reads: retrying the UPDATE would queue on the
            # row's lock behind every settling call.
            while True:
                if monotonic() + pause > deadline:
                    raise _refusal(last, now)
                await anyio.sleep(pause)
                pause = min(pause * 2, 0.5)
                fits = await self._fits_later(*amounts)
                if fits is None:
                    # What was spent meanwhile leaves no room: refuse with fresh figures.
                    break
                if fits:
                    break
        turn.budget_counted = True
        return BudgetHold(turn.tenant, entries, money, input_tokens, max_tokens)

    async def settle(
        self, turn: Turn, hold: BudgetHold, money: Decimal, input_tokens: int, output_tokens: int
    ) -> None:
        """Replace the hold by what the call used, with the turn's next write.

        The settle runs in the transaction of the write that records the
        call's usage (the next step, or the turn's end), not in one of its
        own; thresholds it crosses are announced once that write commits.
        Until then the hold stays on the ledger, which can only refuse more.
        With a Redis ledger it is one script, at once (not interrupted by
        cancellation).

        Args:
            turn: the turn whose next write settles, and whose timeline gets the alerts.
            hold: what :meth:`hold` returned.
            money: what the call cost.
            input_tokens: its input tokens.
            output_tokens: its output tokens.
        """
        crossed: list[tuple[LedgerEntry, int, float]] = []
        if self._redis is not None:
            entries = hold.entries
            with anyio.CancelScope(shield=True):
                claimed = await self._redis.settle(
                    hold.tenant,
                    [(entry.rule, entry.subject, entry.period) for entry in entries],
                    (hold.money, hold.input_tokens, hold.output_tokens),
                    (money, input_tokens, output_tokens),
                )
                crossed = [(entries[index], top, share) for index, top, share in claimed]
                if crossed:
                    await self._announce(turn, hold.tenant, crossed)
            return
        sql = self._sql
        entries = hold.entries
        announces = any(entry.rule.thresholds for entry in entries)
        if not announces and not self._database.is_sqlite:
            # One UPDATE, nothing to read back: on PostgreSQL it rides in the
            # statement that writes the step.
            spent = (money, input_tokens, output_tokens)
            turn.settles.append(settle_update(sql, hold, *spent))
            return

        def work(connection: Connection) -> None:
            crossed[:] = settle_rows(connection, sql, hold, money, input_tokens, output_tokens)

        turn.settles.append(work)
        if announces:
            turn.after_write.append(lambda: self._announce(turn, hold.tenant, crossed))

    async def _announce(
        self, turn: Turn, tenant: str, crossed: list[tuple[LedgerEntry, int, float]]
    ) -> None:
        """Log, count, record and send each threshold a committed settle crossed first."""
        meter = self._meter() if crossed else None
        for entry, threshold, share in crossed:
            rule = entry.rule
            if meter is not None:
                meter.budget_alert(budget=rule.code, scope=rule.scope, threshold=threshold)
            logger.warning(
                "budget %s of tenant %s reached %d%% of its limit for %s (%s: %s)",
                rule.code,
                tenant,
                threshold,
                entry.period,
                rule.scope,
                entry.subject,
            )
            alert = {
                "budget": rule.code,
                "threshold": threshold,
                "used_percent": round(share * 100, 2),
                "period": entry.period,
                "scope": rule.scope,
                "subject": entry.subject,
            }
            turn.pending.append(NewEvent(TimelineKind.BUDGET, alert))
            for notifier in self._notifiers:
                await notifier.send(
                    {
                        "type": "budget.threshold",
                        "tenant": tenant,
                        **alert,
                        "conversation_uuid": turn.uuid,
                    }
                )


def _entries(
    rules: Sequence[BudgetRule], turn: Turn, key_prefix: str | None, now: datetime
) -> list[LedgerEntry]:
    """The ledger rows a call of ``turn`` is charged to, now."""
    entries: list[LedgerEntry] = []
    running = turn.compiled.model.code
    for rule in rules:
        subject = _subject(rule, turn, key_prefix)
        if subject is not None:
            # A downgrade budget counts the calls on its cheaper model but
            # never stops them: they are what it switches to.
            enforced = rule.on_limit == "refuse" or (
                rule.on_limit == "downgrade" and rule.downgrade_to != running
            )
            key, resets = period_of(rule.period, rule.timezone, now)
            fixed = fixed_values(turn.tenant, rule, subject, key, enforced)
            entries.append(LedgerEntry(rule, subject, key, resets, enforced, fixed))
    return entries


def _conversation_key(connection: Connection, conversation_id: int) -> str | None:
    """The API key prefix the conversation was started with (a resumed turn has no request key)."""
    return connection.execute(
        select(conversation_table.c.caller_key_prefix).where(
            conversation_table.c.id == conversation_id
        )
    ).scalar()


def _subject(rule: BudgetRule, turn: Turn, key_prefix: str | None) -> str | None:
    """Whose counters the call is charged to under ``rule``; None when it does not apply."""
    spec = turn.compiled.model
    if rule.model is not None and rule.model != spec.code:
        return None
    if rule.provider is not None and rule.provider != spec.provider.code:
        return None
    match rule.scope:
        case "tenant":
            return "*"
        case "api_key":
            subject = key_prefix
        case "agent":
            subject = turn.compiled.agent_code
        case "action":
            subject = turn.compiled.action_code
        case _:
            subject = turn.handle.memory_id
    if subject is None or (rule.match is not None and subject != rule.match):
        return None
    return subject


def _prompt_tokens(
    turn: Turn, messages: Sequence[ModelMessage], params: ModelRequestParameters
) -> int:
    """The call's input tokens, counted offline with the model's counter."""
    spec = turn.compiled.model
    count = counter_for(spec.provider.kind, spec.model_name).count
    total = 0
    for message in messages:
        for part in message.parts:
            if isinstance(part, BaseToolCallPart):
                # A call's arguments are its input; it has no content. (Asked
                # of every part, a missing attribute costs an exception.)
                args = part.args
                if args is not None:
                    total += count(args if isinstance(args, str) else json.dumps(args))
                continue
            content = getattr(part, "content", None)
            if isinstance(content, str):
                total += count(content) + _MESSAGE_OVERHEAD
            elif content is not None:
                total += count(json.dumps(content, default=str)) + _MESSAGE_OVERHEAD
    for tool in (*params.function_tools, *params.output_tools):
        total += _tool_tokens(count, tool.name, tool.description, tool.parameters_json_schema)
    return total


_TOOL_TOKENS: dict[tuple[Any, ...], tuple[tuple[Any, ...], int]] = {}
"""Tool definitions' token counts, by counter, name, description and schema parts."""


def _tool_tokens(
    count: Callable[[str], int], name: str, description: str | None, schema: dict[str, Any]
) -> int:
    """A tool definition's tokens, counted once per definition rather than once per call.

    Each call gets a fresh copy of the definition's schema, whose parts are
    the definition's own objects: they key the count, and the cache keeps
    them, so an id is never another object's.
    """
    parts = tuple(schema.values())
    key = (count, name, description, tuple(schema), tuple(map(id, parts)))
    found = _TOOL_TOKENS.get(key)
    if found is not None:
        return found[1]
    tokens = count(json.dumps({"name": name, "description": description or ""}))
    tokens += count(json.dumps(schema))
    if len(_TOOL_TOKENS) >= _CHARGED_KEPT:
        _TOOL_TOKENS.clear()
    _TOOL_TOKENS[key] = (parts, tokens)
    return tokens


def _refusal(refused: Refused, now: datetime) -> BudgetExceededError:
    entry = refused.entry
    rule = entry.rule
    resets = entry.resets_at
    when = "it does not reset" if resets is None else f"it resets at {resets.isoformat()}"
    return BudgetExceededError(
        f"budget {rule.code} ({rule.scope} {entry.subject}) has too little {refused.limit} left "
        f"for this call this {rule.period}: {when}",
        budget=rule.code,
        limit=refused.limit,
        remaining=refused.remaining,
        resets_at=None if resets is None else resets.isoformat(),
        retry_after=None if resets is None else (resets - now).total_seconds(),
    )
