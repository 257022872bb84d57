"""The cyclic collector's pauses (``pilothouse._collector``): nested, threaded, restored."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from pilothouse._collector import collector_paused


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    # Each test starts with the collector on, as an application's is, and
    # leaves it on whatever the test did.
    gc.enable()
    yield
    gc.enable()


def test_a_pause_turns_the_collector_off_and_back_on() -> None:
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_nested_pauses_end_with_the_outermost() -> None:
    with collector_paused():
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_pause_that_raises_still_restores_the_collector() -> None:
    with pytest.raises(ImportError, match="broken"), collector_paused():
        raise ImportError("broken")
    assert gc.isenabled()


def test_an_application_that_keeps_the_collector_off_keeps_it_off() -> None:
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_no_collection_runs_inside_a_pause() -> None:
    before = [stats["collections"] for stats in gc.get_stats()]
    with collector_paused():
        # Far more allocations than the youngest generation's threshold (700).
        kept = [[index] for index in range(20_000)]
        # Read inside: the first allocation after the pause collects at once.
        inside = [stats["collections"] for stats in gc.get_stats()]
    assert len(kept) == 20_000
    assert inside == before


def test_pauses_from_several_threads_restore_the_collector_once_all_end() -> None:
    inside = threading.Barrier(3)
    leave = threading.Event()
    seen: list[bool] = []

    def pause() -> None:
        with collector_paused():
            inside.wait()
            leave.wait()
            seen.append(gc.isenabled())

    threads = [threading.Thread(target=pause) for _ in range(2)]
    for thread in threads:
        thread.start()
    inside.wait()  # both threads are inside their pause
    assert not gc.isenabled()
    leave.set()
    for thread in threads:
        thread.join()
    # Whichever thread left first found the other's pause still open.
    assert seen.count(False) >= 1
    assert gc.isenabled()
