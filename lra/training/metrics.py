"""What a run shows and logs as it trains: progress (the bar or plain lines, rate, ETA, TensorBoard)
and the memory-degradation statistics logged at each evaluation.

Not clu's metric writers: clu 0.0.12 imports TensorFlow with them; TensorBoard goes through tensorboardX. One rate:
steps per second of wall time without compilation (evaluations and checkpoints included, so the ETA is what the clock
will show). A step is ticked once finished, not when dispatched: counting dispatched steps made a 214 h run's ETA
swing from 1 h to 25 h (docs/running.md, Progress). Memory statistics (the ConvLuna paper's Section 2, Figure 1;
docs/running.md, Memory diagnostics) of a memory M x D: ``distinct_vectors`` (groups of cells linked at cosine >=
0.99, single linkage), ``effective_rank`` (exp of the entropy of the normalised singular values, Roy & Vetterli
2007: 1 for rank one, M for M orthogonal equal-norm cells), ``mean_pairwise_cosine``; ``packing_entropy``: each
memory cell's entropy over the real keys / log(real keys) (1.0 uniform, 0.0 one key; rows with one real key left
out). Per-example values are averaged over the batch.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lra.console import BarOrLines, clock, duration, terminal_bar_possible

# -- progress: the bar or plain lines, rate and ETA, TensorBoard ---------------------------------------------
log = logging.getLogger("lra")


def _fmt(metrics: dict[str, Any]) -> str:
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())


def _discard(writer: Any) -> None:
    """Close a failed tensorboardX writer for good: left as it is, its atexit hook and event thread retry the
    write at exit and print tracebacks after the run's error line. Pending events are dropped (metrics.jsonl has
    them). Every event file is first marked closed, in one pass that cannot block or fail, so the atexit hook,
    ``add_event`` and ``flush`` do nothing even if the main thread exits while the worker is still stopping."""
    file_writers = list((getattr(writer, "all_writers", None) or {}).values())
    opened = []
    for file_writer in file_writers:
        events = getattr(file_writer, "event_writer", None)
        if events is not None and not getattr(events, "_closed", True):
            events._closed = True
            opened.append(events)
    for events in opened:
        worker = getattr(events, "_worker", None)
        if worker is not None and worker.is_alive() and worker is not threading.current_thread():
            try:
                events._event_queue.put(worker._shutdown_signal, timeout=1)
            except Exception:  # noqa: BLE001 -- a full queue of a dead thread: nothing to stop
                pass
            worker.join(timeout=5)
        try:
            events._ev_writer.close()  # the file is closed even when its last flush fails
        except Exception:  # noqa: BLE001 -- a writer already being discarded after a failure: its error was reported
            pass
    # not writer.close(): a late add_scalar would then open a fresh file writer on the disk that failed


class Progress:
    """Shows training progress; ``enabled=False`` on non-primary hosts."""

    def __init__(
        self,
        total: int,
        start: int,
        workdirs: Path | Sequence[Path],
        enabled: bool = True,
        tensorboard: bool = True,
        refresh_seconds: float = 1.0,
        plain_seconds: float = 30.0,
        projection_warning: str | None = None,
        projection_after: int = 3,
    ):
        """``workdirs``: one per seed, each with its own ``tensorboard/``. ``projection_warning``: once
        ``projection_after`` timed steps give the rate, one line saying how long the rest of the run needs."""
        self.enabled = enabled
        self.out: BarOrLines | None = None
        self.bar: Any = None
        self._tb_dirs = [
            Path(w) / "tensorboard" for w in ([workdirs] if isinstance(workdirs, (str, Path)) else workdirs)
        ]
        self.writers: list[Any] = [None] * len(self._tb_dirs)
        self._old_hook = None
        self.total, self.step = total, start
        self.refresh_seconds, self.plain_seconds = refresh_seconds, plain_seconds
        self._measured_seconds, self._measured_steps = 0.0, 0
        self._last_tick: float | None = None
        self._projection, self._projection_after = projection_warning, projection_after
        self._last_shown = self._last_plain = time.monotonic()
        if not enabled:
            return
        self.out = BarOrLines(
            total,
            start,
            line=partial(print, flush=True),
            use_bar=terminal_bar_possible(),  # looked up here: tests replace it in this module
            unit="step",
            mininterval=0,
            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt}{postfix}",
        )
        self.bar = self.out.bar
        if self.bar is not None:
            self.bar.set_postfix_str("compiling")
        if tensorboard:
            try:
                from tensorboardX import SummaryWriter

                self._old_hook = threading.excepthook
                threading.excepthook = self._thread_failed
                self.writers = [SummaryWriter(str(d)) for d in self._tb_dirs]
            except ImportError:  # optional: metrics.jsonl holds everything anyway
                pass
            except Exception as e:  # optional TensorBoard: any failure is one warning, then off
                self._tensorboard_failed(e)

    @property
    def writer(self) -> Any:
        """The first seed's TensorBoard writer (None when TensorBoard is off)."""
        return self.writers[0] if self.writers else None

    @property
    def rate(self) -> float | None:
        """Steps per second since this process started training, compilation excluded."""
        if self._measured_steps == 0 or self._measured_seconds <= 0:
            return None
        return self._measured_steps / self._measured_seconds

    def eta_seconds(self) -> float | None:
        rate = self.rate
        return None if rate is None else max(self.total - self.step, 0) / rate

    def status(self) -> str:
        """``"8.2 step/s, ETA 0:37"`` (or what is known so far)."""
        rate, eta = self.rate, self.eta_seconds()
        if rate is None or eta is None:  # no rate yet (then no ETA either)
            return "measuring the rate"
        return f"{rate:.3g} step/s, ETA {clock(eta)}"

    def tick(self, step: int, compile_seconds: float = 0.0, now: float | None = None) -> None:
        """The loop finished ``step``; ``compile_seconds`` since the last tick are left out of the rate."""
        now = time.monotonic() if now is None else now
        if self._last_tick is not None and compile_seconds == 0.0:
            self._measured_seconds += now - self._last_tick
            self._measured_steps += step - self.step
        self._last_tick, self.step = now, step
        if not self.enabled:
            return
        if self._projection is not None and self._measured_steps >= self._projection_after and self.rate:
            remaining = max(self.total - step, 0)
            self.message(
                f"warning: at {self.rate:.2g} steps/s this run needs {duration(remaining / self.rate)} "
                f"more for its {remaining:,} remaining steps {self._projection}"
            )
            self._projection = None
        if self.bar is not None:
            if now - self._last_shown >= self.refresh_seconds or step == self.total:
                self.bar.n = step
                self.bar.set_postfix_str(self._postfix(), refresh=True)
                self._last_shown = now
        elif now - self._last_plain >= self.plain_seconds:
            self._plain_line()
            self._last_plain = now

    def _plain_line(self) -> None:
        self.message(f"step {self.step}/{self.total} ({100 * self.step / max(self.total, 1):.0f}%): {self.status()}")

    def _postfix(self) -> str:
        extra = getattr(self, "_train_postfix", "")
        return ", ".join(filter(None, [self.status(), extra]))

    def compiling(self, what: str) -> float:
        """Announce a compilation; returns its start time for :meth:`compiled`."""
        self.message(f"compiling {what} ...")
        return time.monotonic()

    def compiled(self, what: str, started: float) -> float:
        seconds = time.monotonic() - started
        self.message(f"compiled {what} in {seconds:.1f} s")
        return seconds

    def _tensorboard_failed(self, error: BaseException) -> None:
        """TensorBoard is a convenience (metrics.jsonl holds everything): one warning, then off."""
        if getattr(self, "_tb_warned", False):
            return
        self._tb_warned = True
        for writer in self.writers:  # all before the list is cleared: whoever sees None may exit at once
            if writer is not None:
                _discard(writer)
        cause = error.strerror if isinstance(error, OSError) and error.strerror else error
        where = self._tb_dirs[0] if len(self._tb_dirs) == 1 else "the seeds' tensorboard/ folders"
        print(
            f"warning: TensorBoard logging to {where} stopped ({cause}); metrics.jsonl " f"keeps every metric",
            file=sys.stderr,
            flush=True,
        )
        self.writers = [None] * len(self._tb_dirs)

    def _thread_failed(self, args: Any) -> None:
        """tensorboardX writes from a thread: a full disk there must not print a traceback."""
        if args.thread is not None and "EventLogger" in type(args.thread).__name__:
            self._tensorboard_failed(args.exc_value)
        elif self._old_hook is not None:
            self._old_hook(args)

    def scalars(self, index: int, step: int, split: str, metrics: dict[str, Any]) -> None:
        """Write ``metrics`` to seed ``index``'s TensorBoard log."""
        writer = self.writers[index] if self.enabled else None
        if writer is None:
            return
        try:
            for k, v in metrics.items():
                if isinstance(v, (int, float)):
                    writer.add_scalar(f"{split}/{k}", v, step)
        except Exception as e:  # optional TensorBoard: any failure is one warning, then off
            self._tensorboard_failed(e)

    def update(self, step: int, split: str, metrics: dict[str, Any], index: int | None = 0, label: str = "") -> None:
        """Show ``metrics`` (and log them to seed ``index``'s TensorBoard; None: not logged)."""
        if not self.enabled:
            return
        if index is not None:
            self.scalars(index, step, split, metrics)
        where = f" [{label}]" if label else ""
        if self.bar is not None:
            if split == "train":
                self._train_postfix = " ".join(f"{k}={metrics[k]:.4g}" for k in ("loss", "accuracy") if k in metrics)
                self.bar.n = step
                self.bar.set_postfix_str(self._postfix(), refresh=True)
            else:
                self.bar.write(f"step {step} {split}{where}: {_fmt(metrics)}")
        else:
            shown = {k: v for k, v in metrics.items() if k != "steps_per_second"}  # one rate: ours
            rate = f" [{self.status()}]" if split == "train" else ""
            self.message(f"step {step} {split}{where}: {_fmt(shown)}{rate}")
            self._last_plain = time.monotonic()

    def message(self, text: str) -> None:
        if self.out is not None:
            self.out.write(text)

    def close(self) -> None:
        if self.out is not None:
            self.out.close()
        for writer in self.writers:
            if writer is not None:
                try:
                    writer.close()
                except Exception as e:  # optional TensorBoard: any failure is one warning, then off
                    self._tensorboard_failed(e)
        if self._old_hook is not None:
            threading.excepthook, self._old_hook = self._old_hook, None


# -- memory-degradation statistics, logged at each evaluation ------------------------------------------------
DISTINCT_COSINE = 0.99
STATS = ("distinct_vectors", "effective_rank", "mean_pairwise_cosine")


def _cosines(memory_MxD: np.ndarray) -> np.ndarray:
    m = np.asarray(memory_MxD, np.float64)
    unit = m / np.maximum(np.linalg.norm(m, axis=-1, keepdims=True), 1e-12)
    return unit @ unit.T


def distinct_vectors(memory_MxD: np.ndarray, threshold: float = DISTINCT_COSINE) -> int:
    """Number of groups of cells linked by cosine >= ``threshold`` (connected components)."""
    close = _cosines(memory_MxD) >= threshold
    cells = close.shape[0]
    group = -np.ones(cells, int)
    groups = 0
    for start in range(cells):
        if group[start] >= 0:
            continue
        group[start], stack = groups, [start]
        while stack:
            i = stack.pop()
            for j in np.flatnonzero(close[i] & (group < 0)):
                group[j] = groups
                stack.append(int(j))
        groups += 1
    return groups


def effective_rank(memory_MxD: np.ndarray) -> float:
    """exp(entropy of the normalised singular values)."""
    s = np.linalg.svd(np.asarray(memory_MxD, np.float64), compute_uv=False)
    if s.sum() <= 0:
        return 0.0
    p = s / s.sum()
    p = p[p > 0]
    return float(np.exp(-np.sum(p * np.log(p))))


def mean_pairwise_cosine(memory_MxD: np.ndarray) -> float | None:
    """Mean cosine over distinct pairs of cells; None for a single cell."""
    cells = memory_MxD.shape[0]
    if cells < 2:
        return None
    c = _cosines(memory_MxD)
    return float((c.sum() - np.trace(c)) / (cells * (cells - 1)))


def memory_summary(memory_MxD: np.ndarray) -> dict[str, float | None]:
    return {
        "distinct_vectors": float(distinct_vectors(memory_MxD)),
        "effective_rank": effective_rank(memory_MxD),
        "mean_pairwise_cosine": mean_pairwise_cosine(memory_MxD),
    }


def batch_summary(memory_BxMxD: np.ndarray) -> dict[str, float | None]:
    """:func:`memory_summary` of each example's memory, averaged over the batch."""
    rows = [memory_summary(m) for m in np.asarray(memory_BxMxD)]
    out: dict[str, float | None] = {}
    for key in STATS:
        values = [v for r in rows if (v := r[key]) is not None]
        out[key] = float(np.mean(values)) if values else None
    return out


def normalized_entropy(weights_BxHxMxJ: jax.Array, key_mask_BxJ: jax.Array) -> jax.Array:
    """Mean over (example, head, cell) of entropy / log(real keys); rows with one real key skipped."""
    w = weights_BxHxMxJ.astype(jnp.float32)
    real = key_mask_BxJ[:, None, None, :]
    plogp = jnp.where(real & (w > 0), w * jnp.log(jnp.where(w > 0, w, 1.0)), 0.0)
    entropy_BxHxM = -jnp.sum(plogp, axis=-1)
    keys_B = jnp.sum(key_mask_BxJ, axis=-1).astype(jnp.float32)
    log_keys = jnp.log(jnp.maximum(keys_B, 1.0))[:, None, None]
    valid = jnp.broadcast_to((keys_B > 1)[:, None, None], entropy_BxHxM.shape)
    ratio = jnp.where(valid, entropy_BxHxM / jnp.where(valid, log_keys, 1.0), 0.0)
    return jnp.sum(ratio) / jnp.maximum(jnp.sum(valid), 1)


def _blocks(tree: dict[str, Any]) -> list[str]:
    return sorted((k for k in tree if k.startswith("block_")), key=lambda k: int(k.split("_")[1]))


def make_probe(model: Any):
    """Jitted ``probe(params, inputs)``: per block, its output memory (B x M x D) and its packing entropy."""

    def probe(params: Any, inputs: jax.Array) -> tuple[list[jax.Array], list[jax.Array]]:
        _, state = model.apply(
            {"params": params},
            inputs,
            deterministic=True,
            rngs={"attention": jax.random.key(0)},
            mutable=["intermediates"],
        )
        encoder = state["intermediates"]["encoder"]
        memories, entropies = [], []
        for name in _blocks(encoder):
            memories.append(encoder[name]["memory"][0])
            attn = encoder[name]["attention"]
            entropies.append(normalized_entropy(attn["packing_weights"][0], attn["packing_key_mask"][0]))
        return memories, entropies

    return jax.jit(probe)


def collect(probe: Any, params: Any, inputs: jax.Array) -> dict[str, float | None]:
    """metrics.jsonl's ``initial/<stat>``, ``block<i>/<stat>`` (batch means) and ``block<i>/packing_entropy``."""
    memories, entropies = jax.device_get(probe(params, inputs))
    out: dict[str, float | None] = {}
    initial = np.asarray(jax.device_get(params["encoder"]["memory"]))
    out.update({f"initial/{k}": v for k, v in memory_summary(initial).items()})
    for i, (memory, entropy) in enumerate(zip(memories, entropies, strict=False)):
        out.update({f"block{i}/{k}": v for k, v in batch_summary(memory).items()})
        out[f"block{i}/packing_entropy"] = float(entropy)
    return out


def probe_inputs(split: Any, batch_size: int) -> np.ndarray:
    """The first ``batch_size`` examples in file order (lengths mixed), cut to the longest: the same every time."""
    rows = min(batch_size, len(split))
    inputs = np.asarray(split.inputs[:rows])
    longest = max(int(np.max(split.max_lengths[:rows])), 1)
    return inputs[..., :longest]


def log_memory_stats(model: Any, config: Any, validation: Any, sharding: Any):
    """``params -> statistics`` on a fixed validation batch if ``config.log_memory_stats``, else None."""
    if not config.log_memory_stats:
        return None
    from lra.training import hosts

    rows = config.eval_batch_size
    inputs = probe_inputs(validation, rows)
    if len(inputs) < rows:  # keep the batch divisible by the devices: repeat rows
        inputs = np.resize(inputs, (rows,) + inputs.shape[1:])
    placed = hosts.shard_batch({"inputs": inputs}, sharding)["inputs"]
    probe = make_probe(model)
    return lambda params: collect(probe, params, placed)
