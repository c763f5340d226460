"""analyzer/background.py: one rule for errors in background work. Awaited work raises its
error where its result is taken; work nobody awaits is reported as one warning."""

from __future__ import annotations

import threading
import warnings

import pytest

from runlens.analyzer.background import Background, map_in_processes


def _square(x: int) -> int:
    if x == 3:
        raise ValueError("three")
    return x * x


def test_submit_raises_where_the_result_is_taken() -> None:
    with Background(2, "t") as pool:
        ok, bad = pool.submit(_square, 2), pool.submit(_square, 3)
        assert ok.result() == 4
        with pytest.raises(ValueError, match="three"):
            bad.result()


def test_map_and_ahead_keep_order_and_raise_at_the_failing_item() -> None:
    with Background(2, "t") as pool:
        assert list(pool.map(_square, [0, 1, 2])) == [0, 1, 4]
        got = []
        with pytest.raises(ValueError, match="three"):
            for value in pool.ahead(_square, range(6), 2):
                got.append(value)
        assert got == [0, 1, 4]  # the results before the failing one, in order


def test_ahead_holds_at_most_depth_results_ahead() -> None:
    running = []
    lock = threading.Lock()
    live = 0

    def work(x: int) -> int:
        nonlocal live
        with lock:
            live += 1
            running.append(live)
        return x

    with Background(3, "t") as pool:
        for x in pool.ahead(work, range(20), 3):
            with lock:
                live -= 1
            assert x >= 0
    assert max(running) <= 4  # the one the caller holds, and 3 ahead


def test_detached_error_is_one_warning_and_wait_does_not_raise() -> None:
    writer = Background(1, "runlens-test-writer")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        writer.detach(_square, 3)
        writer.detach(_square, 2)
        writer.wait()
        writer.close()
    messages = [str(w.message) for w in caught if w.category is RuntimeWarning]
    assert len(messages) == 1
    assert "runlens-test-writer (_square)" in messages[0] and "three" in messages[0]


def test_map_in_processes_gives_results_in_order() -> None:
    assert map_in_processes(abs, [-3, 1, -2], 2) == [3, 1, 2]
