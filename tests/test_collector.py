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


def _generation_of(target: object) -> int | None:
    """Which collector generation holds ``target`` (None: frozen or untracked)."""
    for generation in range(3):
        if any(candidate is target for candidate in gc.get_objects(generation=generation)):
            return generation
    return None


def test_what_a_pause_built_goes_straight_to_the_oldest_generation() -> None:
    # Left young, the next two young collections would walk all of it.
    with collector_paused():
        built = [[index] for index in range(5_000)]
    assert _generation_of(built) == 2
    assert gc.get_count()[0] < 700, "the youngest generation was not emptied"


def test_a_pause_leaves_a_frozen_heap_frozen() -> None:
    # Promotion (freeze, then unfreeze) would thaw what an application or
    # freeze_once froze; with anything frozen it is skipped.
    kept = [["frozen"]]
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with collector_paused():
            built = [[index] for index in range(100)]
        # The count itself may drop: frozen objects are still freed by
        # reference counting. What matters is that nothing was thawed.
        assert gc.get_freeze_count() > frozen // 2
        assert _generation_of(kept) is None  # still in the permanent generation
        assert _generation_of(built) is not None  # collected as usual, not frozen
    finally:
        gc.unfreeze()


def test_an_application_that_keeps_the_collector_off_gets_no_promotion() -> None:
    gc.disable()
    with collector_paused():
        built = [[index] for index in range(100)]
    assert _generation_of(built) == 0
