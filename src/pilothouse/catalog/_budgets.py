"""The ``budgets`` kind's wire shape: what a spending limit says and its rules.

A budget limits what one scope (the tenant, an API key, an agent, an action or
a user) may spend per period, in money (the prices' currency), input and
output tokens, or turns; optionally only on one model or provider. At the
limit it refuses the call, downgrades it to a named cheaper model, or only
alerts. Enforcement is in :mod:`pilothouse.runtime._budgets`.
"""

from __future__ import annotations

__all__ = ["BUDGET_LIMITS", "BUDGET_PERIODS", "BUDGET_SCOPES", "BudgetSpec"]

from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, StringConstraints, field_validator, model_validator

from pilothouse.catalog._spec import CatalogSpec, Code, Name, Price

BUDGET_SCOPES = ("tenant", "api_key", "agent", "action", "user")
"""Whose spending a budget counts."""
BUDGET_PERIODS = ("hour", "day", "month", "total")
"""How often a budget's counters start again (``total``: never)."""
BUDGET_LIMITS = ("money", "input_tokens", "output_tokens", "turns")
"""What a budget can limit; each is optional, at least one is set."""

Scope = Literal["tenant", "api_key", "agent", "action", "user"]
Period = Literal["hour", "day", "month", "total"]
OnLimit = Literal["refuse", "downgrade", "alert"]
Tokens = Annotated[int, Field(ge=1, le=10**15)]


class BudgetSpec(CatalogSpec):
    """A spending limit per period for a scope.

    Attributes:
        code: the budget's business key.
        name: a label.
        scope: whose spending counts: ``tenant`` (everything), ``api_key``,
            ``agent``, ``action`` or ``user`` (the conversation's memory id).
        match: the one API key prefix, agent, action or user the budget
            covers; without it, each one has its own counters.
        model: only calls of this model count (a model code).
        provider: only calls of this provider's models count.
        period: ``hour``, ``day``, ``month`` (calendar, in ``timezone``) or
            ``total``.
        timezone: where the period's boundaries are (an IANA name).
        money: the most the scope may spend per period, in the prices' currency.
        input_tokens: the most input tokens per period.
        output_tokens: the most output tokens per period.
        turns: the most turns per period.
        on_limit: ``refuse`` the call, ``downgrade`` it to ``downgrade_to``, or
            only ``alert``.
        downgrade_to: the cheaper model a call uses once the limit is reached.
        thresholds: percentages of a limit that raise an alert once per period.
    """

    code: Code
    name: Name = ""
    scope: Scope = "tenant"
    match: Annotated[str, StringConstraints(min_length=1, max_length=255)] | None = None
    model: str | None = None
    provider: str | None = None
    period: Period = "month"
    timezone: Annotated[str, StringConstraints(max_length=64)] = "UTC"
    money: Price | None = None
    input_tokens: Tokens | None = None
    output_tokens: Tokens | None = None
    turns: Tokens | None = None
    on_limit: OnLimit = "refuse"
    downgrade_to: str | None = None
    thresholds: list[Annotated[int, Field(ge=1, le=100)]] = Field(default_factory=list[int])

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {value!r}; write an IANA name such as UTC or Europe/Berlin"
            ) from None
        return value

    @field_validator("thresholds")
    @classmethod
    def _ordered(cls, value: list[int]) -> list[int]:
        return sorted(set(value))

    @model_validator(mode="after")
    def _consistent(self) -> BudgetSpec:
        if all(getattr(self, name) is None for name in BUDGET_LIMITS):
            raise ValueError(
                "a budget needs at least one limit: money, input_tokens, output_tokens or turns"
            )
        if self.on_limit == "downgrade" and self.downgrade_to is None:
            raise ValueError(
                "on_limit 'downgrade' needs downgrade_to: the code of the cheaper model calls "
                "switch to at the limit"
            )
        if self.on_limit != "downgrade" and self.downgrade_to is not None:
            raise ValueError(
                f"downgrade_to applies only with on_limit 'downgrade' (this budget has "
                f"{self.on_limit!r}): remove downgrade_to or write on_limit: downgrade"
            )
        if self.downgrade_to is not None and self.downgrade_to == self.model:
            raise ValueError(
                "downgrade_to names the model the budget counts: calls would switch to the "
                "same model; name a cheaper one"
            )
        if self.scope == "tenant" and self.match is not None:
            raise ValueError(
                "a tenant budget covers the whole tenant: remove match, or choose the scope "
                "it names (api_key, agent, action or user)"
            )
        return self
