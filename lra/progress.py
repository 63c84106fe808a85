"""Progress output: a bar on a terminal, plain log lines otherwise; TensorBoard without TensorFlow."""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger("lra")


def _fmt(metrics: dict[str, Any]) -> str:
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())


class Progress:
    """Shows training progress; ``enabled=False`` on non-primary hosts."""

    def __init__(self, total: int, start: int, workdir: Path, enabled: bool = True, tensorboard: bool = True):
        self.enabled = enabled
        self.bar = None
        self.writer = None
        self._tb_dir = workdir / "tensorboard"
        self._old_hook = None
        if not enabled:
            return
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=start, unit="step", dynamic_ncols=True)
        if tensorboard:
            try:
                from tensorboardX import SummaryWriter

                self._old_hook = threading.excepthook
                threading.excepthook = self._thread_failed
                self.writer = SummaryWriter(str(self._tb_dir))
            except ImportError:  # optional: metrics.jsonl holds everything anyway
                self.writer = None
            except Exception as e:
                self._tensorboard_failed(e)

    def _tensorboard_failed(self, error: BaseException) -> None:
        """TensorBoard is a convenience (metrics.jsonl holds everything): one warning, then off."""
        if self.writer is None and getattr(self, "_tb_warned", False):
            return
        self._tb_warned = True
        writer, self.writer = self.writer, None
        cause = error.strerror if isinstance(error, OSError) and error.strerror else error
        print(f"warning: TensorBoard logging to {self._tb_dir} stopped ({cause}); metrics.jsonl "
              f"keeps every metric", file=sys.stderr, flush=True)
        if writer is not None:
            try:
                writer.close()
            except Exception:
                pass

    def _thread_failed(self, args: Any) -> None:
        """tensorboardX writes from a thread: a full disk there must not print a traceback."""
        if args.thread is not None and "EventLogger" in type(args.thread).__name__:
            self._tensorboard_failed(args.exc_value)
        elif self._old_hook is not None:
            self._old_hook(args)

    def update(self, step: int, split: str, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if self.writer is not None:
            try:
                for k, v in metrics.items():
                    if isinstance(v, (int, float)):
                        self.writer.add_scalar(f"{split}/{k}", v, step)
            except Exception as e:
                self._tensorboard_failed(e)
        if self.bar is not None:
            if split == "train":
                self.bar.n = step
                self.bar.set_postfix({k: f"{v:.4g}" for k, v in metrics.items() if k in ("loss", "accuracy", "steps_per_second")})
            else:
                self.bar.write(f"step {step} {split}: {_fmt(metrics)}")
        else:
            print(f"step {step} {split}: {_fmt(metrics)}", flush=True)

    def message(self, text: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(text)
        else:
            print(text, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.writer is not None:
            try:
                self.writer.close()
            except Exception as e:
                self._tensorboard_failed(e)
        if self._old_hook is not None:
            threading.excepthook, self._old_hook = self._old_hook, None
