"""Kafka acknowledgements whose caller is cancelled while the broker is down.

aiokafka's ``commit_offsets`` sends the request inside ``asyncio.shield``;
on Python 3.11 a cancelled shield forgets its inner task, so the request's
later failure was reported as "Task exception was never retrieved" (seen as
a failure of the real broker-restart test, ``tests/real/test_events_real.py``).
The consumer here commits exactly that way, with a request the test fails
when it chooses.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest

from pilothouse.events import _kafka as kafka
from pilothouse.events._kafka import _InOrderCommits

pytestmark = pytest.mark.anyio


class ConnectionLost(Exception):
    """What the commit request ends with while the broker is down."""


class ShieldingConsumer:
    """Commits as aiokafka does: the request runs shielded from its caller."""

    def __init__(self) -> None:
        self.requests: list[dict[Any, int]] = []
        self.outcomes: list[asyncio.Future[None]] = []
        self.finished = 0
        """Commits that ran to their end (not cancelled)."""

    async def commit(self, offsets: dict[Any, int]) -> None:
        outcome = asyncio.get_running_loop().create_future()
        self.requests.append(offsets)
        self.outcomes.append(outcome)

        async def request() -> None:
            await outcome

        await asyncio.shield(request())
        self.finished += 1


@contextmanager
def unretrieved_reports() -> Iterator[list[dict[str, Any]]]:
    """The loop's "never retrieved" reports while inside, in a list the test reads."""
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    seen: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    try:
        yield seen
    finally:
        loop.set_exception_handler(previous)


async def cancel_acknowledgement(commits: _InOrderCommits, offset: int) -> None:
    """Acknowledge ``offset`` and give up waiting while its commit still runs."""
    with anyio.move_on_after(0.05):
        await commits.acknowledge("p0", offset)


async def test_a_commit_whose_caller_is_cancelled_leaves_no_unretrieved_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = ShieldingConsumer()
    commits = _InOrderCommits(consumer)
    commits.delivered("p0", 0)
    with unretrieved_reports() as seen:
        await cancel_acknowledgement(commits, 0)  # waits on the request: the broker is down
        assert consumer.requests == [{"p0": 1}]
        caplog.set_level(logging.WARNING, logger="pilothouse.events.kafka")
        consumer.outcomes[0].set_exception(ConnectionLost("connection closed"))
        for _ in range(5):
            await asyncio.sleep(0)
        gc.collect()  # a forgotten task reports its failure when it is collected
        for _ in range(5):
            await asyncio.sleep(0)
    assert seen == []
    assert "a commit left by its cancelled caller failed: connection closed" in caplog.text


async def test_the_next_commit_waits_for_an_abandoned_one_so_offsets_never_go_back() -> None:
    consumer = ShieldingConsumer()
    commits = _InOrderCommits(consumer)
    commits.delivered("p0", 0)
    commits.delivered("p0", 1)
    await cancel_acknowledgement(commits, 0)
    assert consumer.requests == [{"p0": 1}]
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(commits.acknowledge, "p0", 1)
        for _ in range(5):
            await asyncio.sleep(0)
        # The later offset is not sent while the abandoned commit still runs.
        assert consumer.requests == [{"p0": 1}]
        consumer.outcomes[0].set_result(None)
        with anyio.fail_after(5):
            while len(consumer.requests) < 2:
                await asyncio.sleep(0)
        assert consumer.requests == [{"p0": 1}, {"p0": 2}]
        consumer.outcomes[1].set_result(None)


async def test_a_waiting_caller_gets_the_commit_s_failure_itself() -> None:
    consumer = ShieldingConsumer()
    commits = _InOrderCommits(consumer)
    commits.delivered("p0", 0)
    async with anyio.create_task_group() as tasks:

        async def fail_soon() -> None:
            while not consumer.outcomes:
                await asyncio.sleep(0)
            consumer.outcomes[0].set_exception(ConnectionLost("connection closed"))

        tasks.start_soon(fail_soon)
        with pytest.raises(ConnectionLost, match="connection closed"):
            await commits.acknowledge("p0", 0)


class RetryingConsumer(ShieldingConsumer):
    """Retries a failed commit request as aiokafka does, for as long as it fails."""

    def __init__(self) -> None:
        super().__init__()
        self.attempts = 0

    async def commit(self, offsets: dict[Any, int]) -> None:
        while True:
            self.attempts += 1

            async def request() -> None:
                raise ConnectionLost("no coordinator")

            try:
                await asyncio.shield(request())
            except ConnectionLost:
                await asyncio.sleep(0.005)  # aiokafka's retry backoff
            else:
                return


async def test_a_stopped_consumer_ends_the_commit_its_cancelled_caller_left_retrying(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kafka, "_ABANDONED_COMMIT_GRACE", 0.05)
    consumer = RetryingConsumer()
    commits = _InOrderCommits(consumer)
    commits.delivered("p0", 0)
    with unretrieved_reports() as seen:
        await cancel_acknowledgement(commits, 0)
        retrying = consumer.attempts
        await asyncio.sleep(0.05)
        assert consumer.attempts > retrying  # left running, still retrying
        with anyio.fail_after(5):
            await commits.close()
        stopped = consumer.attempts
        await asyncio.sleep(0.05)
        assert consumer.attempts == stopped  # no retry after close
        gc.collect()
        await asyncio.sleep(0)
    assert seen == []


async def test_closing_lets_an_abandoned_commit_that_is_answered_finish() -> None:
    consumer = ShieldingConsumer()
    commits = _InOrderCommits(consumer)
    commits.delivered("p0", 0)
    await cancel_acknowledgement(commits, 0)

    async def answer_soon() -> None:
        await asyncio.sleep(0.01)
        consumer.outcomes[0].set_result(None)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(answer_soon)
        with anyio.fail_after(5):
            await commits.close()
    assert consumer.finished == 1  # waited for, not cancelled
