"""Progress output tells the truth: one rate without compilation, an ETA from it, a plain
fallback without a (sized) terminal, compilation announced."""

from __future__ import annotations

import io
import os

import pytest

from lra.training import progress as progress_module
from lra.training.progress import Progress, terminal_bar_possible


def _plain(tmp_path, **kw) -> Progress:
    return Progress(100, 0, tmp_path, tensorboard=False, **kw)


def test_rate_excludes_compilation_and_gives_the_eta(tmp_path, monkeypatch):
    monkeypatch.setattr(progress_module, "terminal_bar_possible", lambda: False)
    p = _plain(tmp_path, plain_seconds=1e9)
    p.tick(1, compile_seconds=40.0, now=40.0)  # step 1 compiled for 40 s: not a rate
    assert p.rate is None and p.status() == "measuring the rate"
    for step in range(2, 12):  # then 10 steps at 0.5 s each
        p.tick(step, now=40.0 + 0.5 * (step - 1))
    assert p.rate == pytest.approx(2.0)
    assert p.eta_seconds() == pytest.approx((100 - 11) / 2.0)
    assert p.status() == "2 step/s, ETA 0:44"
    p.tick(12, compile_seconds=3.0, now=100.0)  # a new shape compiles: still 2 step/s
    assert p.rate == pytest.approx(2.0)


def test_plain_lines_carry_rate_and_eta_every_interval(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(progress_module, "terminal_bar_possible", lambda: False)
    p = _plain(tmp_path, plain_seconds=5.0)
    p._last_plain = 0.0
    p.tick(1, compile_seconds=1.0, now=1.0)
    for step in range(2, 20):
        p.tick(step, now=float(step))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert len(lines) == 3  # at t = 5, 10, 15
    assert lines[0].startswith("step 5/100 (5%): 1 step/s, ETA 1:35")
    p.update(19, "train", {"loss": 2.0, "steps_per_second": 123.0})
    out = capsys.readouterr().out
    assert "steps_per_second" not in out and "[1 step/s, ETA" in out  # one rate, ours


def test_zero_size_terminal_falls_back_to_plain_lines(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(progress_module.shutil, "get_terminal_size", lambda fallback: os.terminal_size((0, 0)))
    assert not terminal_bar_possible(Tty())
    monkeypatch.setattr(progress_module.shutil, "get_terminal_size", lambda fallback: os.terminal_size((80, 24)))
    assert terminal_bar_possible(Tty())
    assert not terminal_bar_possible(io.StringIO())


def test_compilation_is_announced_with_its_time(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(progress_module, "terminal_bar_possible", lambda: False)
    p = _plain(tmp_path)
    started = p.compiling("the training step for batch shape (8, 64)")
    seconds = p.compiled("the training step for batch shape (8, 64)", started)
    out = capsys.readouterr().out
    assert "compiling the training step for batch shape (8, 64) ..." in out
    assert f"compiled the training step for batch shape (8, 64) in {seconds:.1f} s" in out
