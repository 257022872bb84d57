"""What the run loop measures for a metrics system: the :class:`Meter` protocol.

The run loop knows things no turn event carries: how long each model
attempt took and when its first token came, how long each tool ran, which
attempts were retried and how long a turn queued for a slot. A
:class:`Meter` given to ``Pilothouse(meter=...)`` receives them; the HTTP
service's Prometheus collectors are one. Without a meter nothing is
measured and a turn pays nothing for it.

Every label a meter receives has bounded cardinality: catalog codes
(provider, model, action, tool names), coded statuses and error class
names; never a conversation id or content.
"""

from __future__ import annotations

__all__ = ["Meter", "QueueName"]

from typing import Literal, Protocol

QueueName = Literal["database_transaction", "tool_slot"]
"""The queues a turn can wait in: a database transaction slot of the
process's pool, and a slot of the per-response tool concurrency bound."""


class Meter(Protocol):
    """Receives the run loop's measurements (implement every method).

    Methods are called on the event loop, on the hot path of every turn:
    they must be quick and must not raise.
    """

    def turn(
        self,
        *,
        provider: str,
        model: str,
        action: str,
        status: str,
        seconds: float,
        input_tokens: int,
        output_tokens: int,
        cost: float,
    ) -> None:
        """One turn ended (status ``CO``, ``FA``, ``TE``, ``WA``, ...).

        Args:
            provider: the catalog code of the action's provider.
            model: the vendor's model name.
            action: the action's catalog code (``INVOKE`` for every ad-hoc run).
            status: the conversation's status code after the turn.
            seconds: from taking the conversation to the recorded ending.
            input_tokens: tokens sent in the turn.
            output_tokens: tokens received in the turn.
            cost: the turn's estimated cost in the catalog's currency.
        """
        ...

    def model_call(
        self,
        *,
        provider: str,
        model: str,
        action: str,
        status: str,
        seconds: float,
        first_token_seconds: float | None,
    ) -> None:
        """One attempt of a model call ended.

        Args:
            provider: the provider's catalog code.
            model: the vendor's model name.
            action: the action's catalog code.
            status: ``ok``, or the pilothouse error class that ended it
                (``RateLimitError``, ``ProviderTimeoutError``, ...).
            seconds: the attempt's latency.
            first_token_seconds: for a streamed attempt, the time to its
                first text or reasoning token; None when not streamed or no
                token came.
        """
        ...

    def retry(self, *, provider: str, model: str, action: str, error: str) -> None:
        """A failed model attempt will be tried again.

        Args:
            provider: the provider's catalog code.
            model: the vendor's model name.
            action: the action's catalog code.
            error: the pilothouse error class of the failed attempt.
        """
        ...

    def tool_call(self, *, tool: str, action: str, status: str, seconds: float) -> None:
        """One tool execution ended.

        Args:
            tool: the tool's name as the model called it.
            action: the action's catalog code.
            status: the tool call's status (``succeeded``, ``failed``, ``denied``).
            seconds: from the policy check to the result.
        """
        ...

    def budget_alert(self, *, budget: str, scope: str, threshold: int) -> None:
        """A budget's spent share passed one of its thresholds (once per period).

        Args:
            budget: the budget's catalog code.
            scope: its scope (``tenant``, ``api_key``, ``agent``, ``action``, ``user``).
            threshold: the percentage crossed.
        """
        ...

    def budget_downgrade(self, *, budget: str, model: str) -> None:
        """A ``downgrade`` budget at its limit switched a call to its cheaper model.

        Args:
            budget: the budget's catalog code.
            model: the catalog code of the model the call switched to.
        """
        ...

    def queue_wait(self, *, queue: QueueName, seconds: float) -> None:
        """A turn waited for a slot (only waits that actually blocked are reported).

        Args:
            queue: which queue.
            seconds: how long it waited.
        """
        ...
