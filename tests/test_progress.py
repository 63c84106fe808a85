"""Progress output tells the truth: one rate without compilation, an ETA from it, a plain
fallback without a (sized) terminal, compilation announced."""

from __future__ import annotations

import io
import os
import re

import pytest

from lra import console
from lra.console import terminal_bar_possible
from lra.training import loop as progress_module
from lra.training.loop import Progress


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

    monkeypatch.setattr(console.shutil, "get_terminal_size", lambda fallback: os.terminal_size((0, 0)))
    assert not terminal_bar_possible(Tty())
    monkeypatch.setattr(console.shutil, "get_terminal_size", lambda fallback: os.terminal_size((80, 24)))
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


def test_paper_scale_projection_is_one_warning_once_the_rate_is_known(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(progress_module, "terminal_bar_possible", lambda: False)
    p = Progress(50_000, 0, tmp_path, tensorboard=False, plain_seconds=1e9, projection_warning="on this CPU")
    p.tick(1, compile_seconds=60.0, now=60.0)
    for step in range(2, 4):  # two timed steps: the rate is not yet trusted
        p.tick(step, now=60.0 + (step - 1) / 0.065)
    assert "warning" not in capsys.readouterr().out
    for step in range(4, 10):
        p.tick(step, now=60.0 + (step - 1) / 0.065)
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning")]
    assert warnings == [
        "warning: at 0.065 steps/s this run needs ~214 h (8.9 days) more for its 49,996 remaining " "steps on this CPU"
    ]


def test_projection_sizes():
    assert console.duration(214 * 3600) == "~214 h (8.9 days)"
    assert console.duration(12.4 * 3600) == "~12 h" and console.duration(3.24 * 3600) == "~3.2 h"
    assert console.duration(700) == "~12 min"
    assert console.duration(3.2) == "~3 s"


def test_clock_and_sizes():
    """lra.console's formatters, shared by training, the data pipeline, sweeps, preflight and benchmarks."""
    assert console.clock(44.4) == "0:44" and console.clock(3723) == "1:02:03" and console.clock(30 * 3600) == "30:00:00"
    assert console.format_bytes(7.73e9) == "7.73 GB" and console.format_bytes(12_345) == "12.3 kB"
    assert console.format_bytes(80) == "80 B"
    assert console.binary_bytes(1.5 * 2**30) == "1.50 GiB" and console.binary_bytes(12.3 * 2**20) == "12.3 MiB"
    assert console.binary_bytes(1.5 * 2**30, digits=1) == "1.5 GiB"
    assert console.mib_cell(None) == "" and console.mib_cell(1234.5 * 2**20) == "1,234.5"
    assert console.mib_cell(3 * 2**20, digits=0) == "3"


def test_byte_progress_draws_through_the_same_bar_or_lines(capsys):
    """Without a terminal the download's progress is plain ``lra.data:`` lines (per 10%) with an ETA clock."""
    import io

    from lra.data.byte_progress import Progress as BytesProgress

    with BytesProgress("downloading x", 1000, stream=io.StringIO()) as bar:
        assert bar.bar is None
        for _ in range(10):
            bar.update(100)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 10 and lines[-1].startswith("lra.data: downloading x: 1.0 kB of 1.0 kB (100%), ")
    assert all(re.search(r"\(\d+%\), [\d.]+ [kMG]?B/s, ETA \d+:\d\d$", line) for line in lines), lines


def test_paper_scale_on_cpu_warns_and_other_presets_do_not():
    from lra.defaults import make_config
    from lra.training.loop import projection_warning

    assert "on this CPU" in projection_warning(make_config("listops", "convluna", ""))
    assert projection_warning(make_config("listops", "convluna", "cpu")) is None


def test_the_loop_ticks_finished_steps_never_dispatched_ones(tmp_path, smoke_data_dir, monkeypatch):
    """Issue 39 point 1: jax dispatches asynchronously, so the bar (and its ETA) must count a step only
    once its metrics are ready. Each tick is checked against the newest step the loop waited for."""
    import jax

    from lra.training import loop
    from test_train import smoke

    dispatched, finished, ticks = [0], [0], []
    step_of: dict[int, int] = {}
    make_steps, block, tick = loop.make_steps, jax.block_until_ready, Progress.tick

    def counting_steps(*args, **kwargs):
        train_step, eval_step = make_steps(*args, **kwargs)

        def step(state, batch):
            state, metrics = train_step(state, batch)
            dispatched[0] += 1
            step_of[id(metrics)] = dispatched[0]
            return state, metrics

        return step, eval_step

    def waiting(x):  # steps run in order on one device: waiting for step k means steps <= k are done
        finished[0] = max(finished[0], step_of.get(id(x), 0))
        return block(x)

    def recording_tick(self, step, *args, **kwargs):
        ticks.append((step, finished[0], dispatched[0]))
        return tick(self, step, *args, **kwargs)

    monkeypatch.setattr(loop, "make_steps", counting_steps)
    monkeypatch.setattr(jax, "block_until_ready", waiting)
    monkeypatch.setattr(Progress, "tick", recording_tick)
    config = smoke(smoke_data_dir, num_train_steps=8, log_every=8, eval_every=8, checkpoint_every=8)
    loop.train_and_evaluate(config, tmp_path / "run")
    assert [t[0] for t in ticks][-1] == 8 and dispatched[0] == 8
    assert all(ticked <= done for ticked, done, _ in ticks), ticks  # never a step still in flight
    assert all(ticked >= sent - 1 for ticked, _, sent in ticks), ticks  # and at most one behind
