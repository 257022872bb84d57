"""The budget ledger in Redis: holds and settles as Lua scripts, atomic across processes.

With ``PILOTHOUSE_REDIS_URL`` set, every process of the deployment holds and
settles on the same Redis hashes instead of the database's ``budget_usage``
rows. A hold is one script: it reads every row the call is charged to,
checks spent + held + the call against each enforced limit and, only if all
fit, adds the call to every row; Redis runs a script alone, so two
processes can never both take the last of a limit. A settle is one script
too: it turns the hold into what was spent and claims the highest threshold
the row has newly reached, so each is announced once per period.

A row is the hash ``<prefix>budget:<tenant>:<budget>:<period>:<subject>``.
The period is part of the key (the gate's own period key), so every process
moves to the next period's hash at the boundary, exactly once; a hash
expires a day after its period ends (``total`` never). Money is kept in
integer billionths of the prices' currency (exact up to nine million a
period); a call's worst case is rounded up, what it spent to the nearest.
"""

from __future__ import annotations

__all__ = ["RedisLedger"]

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_CEILING, ROUND_HALF_EVEN, Decimal
from typing import TYPE_CHECKING, Any, Final, cast

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from pilothouse.runtime._budgetledger import BudgetRule

_UNIT: Final = Decimal("1e9")
_NANO: Final = Decimal("1e-9")
_KEPT_AFTER_PERIOD: Final = 86_400
_FIELDS: Final = (
    "spent_money",
    "held_money",
    "spent_input",
    "held_input",
    "spent_output",
    "held_output",
    "turns",
    "alerted",
)

# KEYS: the rows. ARGV: money, input, output, turns (the call's worst case),
# then per row: ttl (0: none), enforced (1/0), and its four limits (-1: none).
# Returns {0} when held, else {i, the row's fields} for the first row that
# does not take it (nothing was changed).
_HOLD: Final = """
local amount = {tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])}
for i = 1, #KEYS do
  local at = 4 + (i - 1) * 6
  if ARGV[at + 2] == '1' then
    local v = redis.call('HMGET', KEYS[i], 'spent_money', 'held_money', 'spent_input',
      'held_input', 'spent_output', 'held_output', 'turns', 'alerted')
    local used = {
      (tonumber(v[1]) or 0) + (tonumber(v[2]) or 0),
      (tonumber(v[3]) or 0) + (tonumber(v[4]) or 0),
      (tonumber(v[5]) or 0) + (tonumber(v[6]) or 0),
      (tonumber(v[7]) or 0)}
    for k = 1, 4 do
      local limit = tonumber(ARGV[at + 2 + k])
      if limit >= 0 and used[k] + amount[k] > limit then
        return {i, v[1] or '0', v[2] or '0', v[3] or '0', v[4] or '0', v[5] or '0',
          v[6] or '0', v[7] or '0', v[8] or '0'}
      end
    end
  end
end
for i = 1, #KEYS do
  redis.call('HINCRBY', KEYS[i], 'held_money', amount[1])
  redis.call('HINCRBY', KEYS[i], 'held_input', amount[2])
  redis.call('HINCRBY', KEYS[i], 'held_output', amount[3])
  redis.call('HINCRBY', KEYS[i], 'turns', amount[4])
  local ttl = tonumber(ARGV[4 + (i - 1) * 6 + 1])
  if ttl > 0 then redis.call('EXPIRE', KEYS[i], ttl) end
end
return {0}
"""

# KEYS: the rows. ARGV: held money, input, output; spent money, input,
# output; then per row: its four limits (-1: none), the number of its
# thresholds and the thresholds. Returns per row the threshold this settle
# claimed (0: none) and the spent share in millionths.
_SETTLE: Final = """
local at = 7
local out = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  redis.call('HINCRBY', key, 'held_money', -tonumber(ARGV[1]))
  redis.call('HINCRBY', key, 'held_input', -tonumber(ARGV[2]))
  redis.call('HINCRBY', key, 'held_output', -tonumber(ARGV[3]))
  local spent = {
    redis.call('HINCRBY', key, 'spent_money', tonumber(ARGV[4])),
    redis.call('HINCRBY', key, 'spent_input', tonumber(ARGV[5])),
    redis.call('HINCRBY', key, 'spent_output', tonumber(ARGV[6])),
    tonumber(redis.call('HGET', key, 'turns') or '0')}
  local share = 0
  for k = 1, 4 do
    local limit = tonumber(ARGV[at + k - 1])
    if limit > 0 then share = math.max(share, spent[k] / limit) end
  end
  local count = tonumber(ARGV[at + 4])
  local alerted = tonumber(redis.call('HGET', key, 'alerted') or '0')
  local top = 0
  for t = 1, count do
    local threshold = tonumber(ARGV[at + 4 + t])
    if share * 100 >= threshold and threshold > alerted and threshold > top then
      top = threshold
    end
  end
  if top > 0 then redis.call('HSET', key, 'alerted', top) end
  out[#out + 1] = top
  out[#out + 1] = math.floor(share * 1000000)
  at = at + 5 + count
end
return out
"""


def _units(money: Decimal, *, up: bool) -> int:
    rounding = ROUND_CEILING if up else ROUND_HALF_EVEN
    return int((money * _UNIT).to_integral_value(rounding=rounding))


def _limit(value: Decimal | int | None, *, money: bool = False) -> int:
    if value is None:
        return -1
    return int(Decimal(value) * _UNIT) if money else int(value)


@dataclass(frozen=True, slots=True)
class RedisRow:
    """A Redis ledger row, with the attributes of a database row the gate reads."""

    subject: str
    spent_money: Decimal
    held_money: Decimal
    spent_input: int
    held_input: int
    spent_output: int
    held_output: int
    turns: int
    alerted: int

    @classmethod
    def of(cls, subject: str, values: Sequence[Any]) -> RedisRow:
        """Build a row from the hash's values in ``_FIELDS`` order (missing: 0)."""
        number = [int(value or 0) for value in values]
        return cls(subject, _money(number[0]), _money(number[1]), *number[2:])


def _money(units: int) -> Decimal:
    """Billionths as money, with nine decimal places (zero as plain ``0``)."""
    return Decimal(units).scaleb(-9).quantize(_NANO) if units else Decimal(0)


def _glob(text: str) -> str:
    """``text`` with SCAN's pattern characters escaped."""
    return "".join(f"\\{char}" if char in "*?[]\\" else char for char in text)


class RedisLedger:
    """Holds and settles budget rows in the deployment's Redis.

    Args:
        client: the Redis client (``Coordination.client``).
        prefix: put before every key (``PILOTHOUSE_REDIS_PREFIX``).
    """

    def __init__(self, client: Redis, prefix: str) -> None:
        self._client = client
        self._prefix = prefix
        self._hold: Any = client.register_script(_HOLD)
        self._settle: Any = client.register_script(_SETTLE)

    def key(self, tenant: str, budget: str, period: str, subject: str) -> str:
        """The hash of one row."""
        return f"{self._prefix}budget:{tenant}:{budget}:{period}:{subject}"

    async def hold(
        self,
        tenant: str,
        rows: Sequence[tuple[BudgetRule, str, str, datetime | None, bool]],
        money: Decimal,
        input_tokens: int,
        output_tokens: int,
        turns: int,
        now: datetime,
    ) -> tuple[int, RedisRow] | None:
        """Hold the call on every row, or on none; None when held.

        Args:
            tenant: whose rows.
            rows: per row, the rule, subject, period, period end and whether
                its limits stop the call.
            money: the call's worst-case cost.
            input_tokens: its worst-case input tokens.
            output_tokens: its ``max_tokens``.
            turns: 1 for a turn's first counted call, else 0.
            now: the gate's clock (for the rows' expiry).

        Returns:
            None when held; else the index of the first row that did not take
            it and that row as it stands.
        """
        args: list[Any] = [_units(money, up=True), input_tokens, output_tokens, turns]
        keys: list[str] = []
        for rule, subject, period, resets, enforced in rows:
            keys.append(self.key(tenant, rule.code, period, subject))
            ttl = 0 if resets is None else int((resets - now).total_seconds()) + _KEPT_AFTER_PERIOD
            args += [
                max(ttl, 1) if resets is not None else 0,
                1 if enforced else 0,
                _limit(rule.money, money=True),
                _limit(rule.input_tokens),
                _limit(rule.output_tokens),
                _limit(rule.turns),
            ]
        answer = await self._hold(keys=keys, args=args)
        index = int(answer[0])
        if index == 0:
            return None
        subject = rows[index - 1][1]
        return index - 1, RedisRow.of(subject, answer[1:])

    async def settle(
        self,
        tenant: str,
        rows: Sequence[tuple[BudgetRule, str, str]],
        held: tuple[Decimal, int, int],
        spent: tuple[Decimal, int, int],
    ) -> list[tuple[int, int, float]]:
        """Turn a hold into what was spent; return (row index, threshold, share) claimed."""
        args: list[Any] = [
            _units(held[0], up=True),
            held[1],
            held[2],
            _units(spent[0], up=False),
            spent[1],
            spent[2],
        ]
        keys: list[str] = []
        for rule, subject, period in rows:
            keys.append(self.key(tenant, rule.code, period, subject))
            args += [
                _limit(rule.money, money=True),
                _limit(rule.input_tokens),
                _limit(rule.output_tokens),
                _limit(rule.turns),
                len(rule.thresholds),
                *rule.thresholds,
            ]
        answer = await self._settle(keys=keys, args=args)
        claimed: list[tuple[int, int, float]] = []
        for index in range(len(rows)):
            top, share = int(answer[2 * index]), int(answer[2 * index + 1])
            if top:
                claimed.append((index, top, share / 1_000_000))
        return claimed

    async def read(self, tenant: str, budget: str, period: str, subject: str) -> RedisRow | None:
        """One row as it stands, or None when nothing was held on it this period."""
        values = await self._client.hmget(self.key(tenant, budget, period, subject), _FIELDS)
        if all(value is None for value in values):
            return None
        return RedisRow.of(subject, values)

    async def rows(self, tenant: str, budget: str, period: str) -> list[RedisRow]:
        """Every subject's row of a budget in a period, by subject."""
        start = self.key(tenant, budget, period, "")
        found: list[RedisRow] = []
        keys: AsyncIterator[Any] = self._client.scan_iter(match=f"{_glob(start)}*", count=500)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        async for raw in keys:
            key = raw.decode() if isinstance(raw, bytes) else str(cast("object", raw))
            row = await self.read(tenant, budget, period, key[len(start) :])
            if row is not None:
                found.append(row)
        return sorted(found, key=lambda row: row.subject)
