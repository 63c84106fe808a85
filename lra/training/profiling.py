"""A jax.profiler trace of a window of training steps: ``python -m lra.train ... --profile=START:COUNT``.

The trace (TensorBoard/xprof's ``plugins/profile/<date>/``, with a Perfetto ``perfetto_trace.json.gz``)
covers steps START+1 .. START+COUNT. Every step of every run is annotated (``train`` step markers
and a ``host_batch`` span around building and placing the batch; free when no trace is on), so the
trace separates host input from the device's work. ``python -m lra.bench.profile_summary <dir>`` turns
it into a breakdown: step time, host input, device busy time, gaps between kernels, top ops.

The window must not include a validation or checkpoint step (they would be timed as training),
and must start after the first step (which compiles); both are checked before training starts.
Fetching the logged metrics every ``log_every`` steps is part of training and stays in.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import ml_collections

from lra.errors import InputError


@dataclasses.dataclass
class ProfileWindow:
    start: int  # steps already done when the trace starts
    count: int  # steps traced
    folder: Path
    active: bool = False

    @classmethod
    def parse(cls, spec: str, folder: Path) -> ProfileWindow:
        start, sep, count = spec.partition(":")
        try:
            window = cls(int(start), int(count), folder)
        except ValueError:
            window = None
        if window is None or not sep or window.start < 1 or window.count < 1:
            raise InputError(
                f"--profile={spec!r}: expected START:COUNT with START >= 1 (the first step "
                f"compiles) and COUNT >= 1, e.g. --profile=20:10"
            )
        return window

    def check(self, config: ml_collections.ConfigDict) -> None:
        """Refuse a window that would time validation, checkpoints or steps past the end."""
        last = self.start + self.count
        if last > config.num_train_steps:
            raise InputError(
                f"--profile={self.start}:{self.count} ends at step {last}, after "
                f"num_train_steps={config.num_train_steps}: choose an earlier window"
            )
        for every, name in ((config.eval_every, "eval_every"), (config.checkpoint_every, "checkpoint_every")):
            hit = next((s for s in range(self.start + 1, last) if s % every == 0), None)
            if hit is not None:
                raise InputError(
                    f"--profile={self.start}:{self.count} covers step {hit}, a multiple of "
                    f"{name}={every}, whose extra work would be timed as training: choose a "
                    f"window between two multiples of {name} (the last traced step may be one)"
                )

    def before_step(self, done: int) -> None:
        if done == self.start and not self.active:
            self.folder.mkdir(parents=True, exist_ok=True)
            jax.profiler.start_trace(str(self.folder), create_perfetto_trace=True)
            self.active = True

    def after_step(self, done: int, state: object) -> str | None:
        """Stop after the window's last step (waiting for the device, so its kernels are in the
        trace); returns the line to show, or None."""
        if self.active and done == self.start + self.count:
            jax.block_until_ready(state)
            self.stop()
            return (
                f"profile of steps {self.start + 1}-{done} written to {self.folder}; summary: "
                f"python -m lra.bench.profile_summary {self.folder}"
            )
        return None

    def stop(self) -> None:
        if self.active:
            self.active = False
            jax.profiler.stop_trace()
