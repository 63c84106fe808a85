"""Ctrl-C acts within about one step: the loop runs at most one step ahead of the computation
(issue 39). Before, the host queued up to ``log_every`` steps and a stop waited for all of them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_sigint_under_a_deep_dispatch_queue_stops_within_seconds_with_a_checkpoint(tmp_path, smoke_data_dir):
    workdir = tmp_path / "run"
    # ~0.05-0.2 s steps (batch 256 of length 64), nothing logged or saved for 100,000 steps: an unbounded
    # queue would hold hundreds of steps after a few seconds of dispatching.
    argv = [
        sys.executable,
        "-m",
        "lra.train",
        "--config",
        "configs/listops_transformer.py:smoke",
        "--config.num_train_steps=100000",
        "--config.log_every=100000",
        "--config.eval_every=100000",
        "--config.checkpoint_every=100000",
        "--config.batch_size=256",
        "--config.model.mlp_dim=256",
        f"--config.data_dir={smoke_data_dir}",
        "--workdir",
        str(workdir),
    ]
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"},
    )
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("compiled the training step"):
            break
    time.sleep(4.0)  # dispatching: an unbounded host would now be far ahead
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    waited = time.monotonic() - sent
    assert proc.returncode == 128 + signal.SIGINT, "".join(lines) + out
    assert waited < 15.0, f"the stop took {waited:.1f} s"
    assert "finishing the step in flight" in out
    metrics = (
        [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
        if (workdir / "metrics.jsonl").exists()
        else []
    )
    assert (workdir / "checkpoints").is_dir() and any((workdir / "checkpoints").iterdir())
    assert all(r["step"] < 100000 for r in metrics)
