"""Seeds' checkpoint saves side by side (lra.training.loop.save_each): all run, failures surface in seed order."""

from __future__ import annotations

import threading

import pytest

from lra.training import loop


def test_saves_run_side_by_side():
    # four saves that each wait for all four: one after another, the first would time out
    barrier = threading.Barrier(4, timeout=30)
    done = []
    loop.save_each([lambda k=k: done.append((barrier.wait(), k)) for k in range(4)])
    assert sorted(k for _, k in done) == [0, 1, 2, 3]


def test_every_save_finishes_and_the_first_failure_in_seed_order_is_raised():
    done = []

    def save(k: int) -> None:
        if k in (1, 3):
            raise OSError(f"disk full at seed {k}")
        done.append(k)

    with pytest.raises(OSError, match="seed 1"):
        loop.save_each([lambda k=k: save(k) for k in range(5)])
    assert sorted(done) == [0, 2, 4]


@pytest.mark.parametrize("threads", [1, 8])
def test_one_at_a_time_when_switched_off_or_alone(monkeypatch, threads):
    monkeypatch.setattr(loop, "SAVE_THREADS", threads)
    seen = []
    saves = [lambda k=k: seen.append((k, threading.current_thread().name)) for k in range(1 if threads > 1 else 3)]
    loop.save_each(saves)
    assert [k for k, _ in seen] == list(range(len(saves)))
    assert all(name == threading.main_thread().name for _, name in seen)
