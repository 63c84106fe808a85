"""``lra.train --profile``: the window's checks, a real trace on CPU, and the summary's arithmetic
on a synthetic GPU-like trace (device process, two streams, an XLA Ops line)."""

from __future__ import annotations

import gzip
import json

import pytest

from lra.train import train_and_evaluate
from lra.training.loop import ProfileWindow
from lra_lab.bench import profile_summary


def test_window_spec_and_placement_are_checked(tmp_path):
    from test_train import smoke

    config = smoke(tmp_path, num_train_steps=20, eval_every=10, checkpoint_every=5)
    for bad in ("3", "0:4", "a:b", "3:0"):
        with pytest.raises(ValueError, match="START:COUNT"):
            ProfileWindow.parse(bad, tmp_path)
    with pytest.raises(ValueError, match="step 5, a multiple of checkpoint_every=5"):
        ProfileWindow.parse("2:4", tmp_path).check(config)
    with pytest.raises(ValueError, match="after num_train_steps=20"):
        ProfileWindow.parse("16:5", tmp_path).check(config)
    ProfileWindow.parse("5:5", tmp_path).check(config)  # steps 6-10: the last may validate


@pytest.mark.slow  # benchmark / GPU-kit end to end: run deliberately (-m slow), keeps the default suite under 10 min
def test_profiled_run_writes_a_trace_the_summary_reads(smoke_data_dir, tmp_path, capsys):
    from test_train import smoke

    config = smoke(smoke_data_dir, num_train_steps=12, eval_every=6, checkpoint_every=6)
    train_and_evaluate(config, tmp_path / "run", profile="1:4")
    assert "profile of steps 2-5 written to" in capsys.readouterr().out
    assert profile_summary.main([str(tmp_path / "run" / "profile")]) == 0
    summary = json.loads((tmp_path / "run" / "profile" / "profile_summary.json").read_text())
    assert summary["steps"] == 4 and summary["step_numbers"] == [2, 3, 4, 5]
    assert 0 < summary["host_input_fraction"] < 1 and summary["step_seconds"] > 0
    assert not summary["device_timeline"] and "no device timeline" in summary["verdict"]
    # a profile folder does not stand in the way of resuming or finishing the run
    assert train_and_evaluate(config, tmp_path / "run")["num_train_steps"] == 12


def _trace(tmp_path, kernels, input_us, step_us=(0, 1000, 1000, 2000)):
    """Two host step markers, one host_batch span per step, kernels on a device process."""
    events = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}},
        {"ph": "M", "pid": 7, "name": "process_name", "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "pid": 7, "tid": 1, "name": "thread_name", "args": {"name": "Stream #13(Compute)"}},
        {"ph": "M", "pid": 7, "tid": 2, "name": "thread_name", "args": {"name": "Stream #14(Compute)"}},
        {"ph": "M", "pid": 7, "tid": 3, "name": "thread_name", "args": {"name": "XLA Ops"}},
    ]
    for k, (a, b) in enumerate(zip(step_us[::2], step_us[1::2], strict=False)):
        events.append(
            {"ph": "X", "pid": 1, "tid": 9, "name": "train", "ts": a, "dur": b - a, "args": {"step_num": str(k + 1)}}
        )
        events.append({"ph": "X", "pid": 1, "tid": 9, "name": "host_batch", "ts": a, "dur": input_us})
    for tid, name, ts, dur in kernels:
        events.append({"ph": "X", "pid": 7, "tid": tid, "name": name, "ts": ts, "dur": dur})
    path = tmp_path / "plugins" / "profile" / "x" / "perfetto_trace.json.gz"
    path.parent.mkdir(parents=True)
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    return profile_summary.summarize(profile_summary.load_events(profile_summary.find_trace(tmp_path)))


def test_summary_of_a_kernel_bound_trace(tmp_path):
    # stream 13: [0, 900) and [1000, 1950); stream 14 overlaps [800, 1000): busy = 1950 of 2000 us
    kernels = [
        (1, "fusion.1", 0, 900),
        (1, "fusion.1", 1000, 950),
        (2, "gemm", 800, 200),
        (3, "dot.5", 0, 1200),
        (3, "reduce.2", 1200, 600),
    ]
    s = _trace(tmp_path, kernels, input_us=50)
    assert s["steps"] == 2 and s["step_seconds"] == pytest.approx(1e-3)
    assert s["device_busy_fraction"] == pytest.approx(1950 / 2000)
    assert s["device_idle_seconds_per_step"] == pytest.approx(25e-6)
    assert s["host_input_fraction"] == pytest.approx(100 / 2000)
    assert s["kernels_per_step"] == pytest.approx(1.5)  # XLA Ops events are names, not extra kernels
    assert [o["name"] for o in s["top_ops"]] == ["dot.5", "reduce.2"]
    assert s["device_threads"] == ["Stream #13(Compute)", "Stream #14(Compute)"]
    assert s["verdict"].startswith("kernel-bound") and "dot.5" in s["verdict"]


def test_summary_names_launch_gaps_and_input(tmp_path):
    many_short = [(1, "k", t, 20) for t in range(0, 2000, 100)]  # busy 20% of the window
    s = _trace(tmp_path / "a", many_short, input_us=100)
    assert s["device_busy_fraction"] == pytest.approx(400 / 2000)
    assert s["verdict"].startswith("launch/dispatch-bound") and "10 kernels per step" in s["verdict"]
    s = _trace(tmp_path / "b", many_short, input_us=800)
    assert s["verdict"].startswith("input-bound")


def test_summary_refuses_a_trace_without_step_markers(tmp_path):
    with pytest.raises(ValueError, match="no 'train' step markers"):
        profile_summary.summarize([{"ph": "X", "pid": 1, "name": "other", "ts": 0, "dur": 1}])
    assert profile_summary.main([str(tmp_path)]) == 2
