"""CPU speed settings that leave every computed number bit-identical.

Three knobs, each on by default for processes that train, each measured and recorded in the run
(``result.json``'s ``speed_settings``):

* **allocator** (``LRA_FAST_ALLOC``): XLA's CPU runtime takes its per-step buffers from glibc
  ``malloc``. Buffers above the mmap threshold are mapped and unmapped every step, so the kernel
  zeroes the whole working set again each step: up to a third of the step's CPU time in minor page
  faults. glibc's own tunables (no root, no extra library) keep the buffers: ``mmap_max=0`` serves
  every block from the heap, ``arena_max=1`` keeps XLA's threads off per-thread arenas (whose heaps
  are mapped and unmapped as wholes), and a huge ``trim_threshold`` stops freed memory going back
  to the kernel. Measured: 8.9M -> 0.3M minor faults for 300 ConvLuna steps, system time 30 s -> 5 s
  (benchmark records: ``results/bench/laptop_steps_*.json``). Tunables are read at process start,
  so a command re-executes itself once with them (:func:`reexec_with_fast_allocator`) and parents
  pass them to children (:func:`child_environment`). Other libcs ignore the variable.
* **unrolled threefry** (``LRA_UNROLLED_THREEFRY=1``, off by default: see
  :func:`unroll_threefry_on_cpu`): jax lowers the threefry2x32 hash on CPU as a
  rolled 5-round ``fori_loop`` that XLA cannot fuse; dropout's random bits then cost 17-29% of the
  step. jax's own unrolled lowering (the one it uses on GPU/TPU: the same integer arithmetic) is
  registered for CPU here. jax has no public switch for it, so this is the one place that touches
  ``jax._src``; :func:`unroll_threefry_on_cpu` returns False (and the run keeps jax's default) when
  a jax upgrade moves it, and ``tests/test_cpu_speed.py`` fails loudly then.
* **pinning** (``LRA_PIN_CORE=N``): runners that start two programs at once pin each to its own
  core *after* XLA has started its intra-op threads (:func:`pin_process_to_core`), so each keeps
  its two threads and computes exactly what an unpinned run does. ``taskset -c N`` at start-up
  would give XLA one thread and change the losses at ulp level.

``LRA_FAST_ALLOC=0`` switches the allocator settings off; ``LRA_UNROLLED_THREEFRY=1`` switches the
unrolled lowering on.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Mapping

ALLOC_SWITCH = "LRA_FAST_ALLOC"
THREEFRY_SWITCH = "LRA_UNROLLED_THREEFRY"
PIN_VARIABLE = "LRA_PIN_CORE"
# trim_threshold is a size_t: 2**62 is "never"; mmap_max=0 and arena_max=1 as explained above.
GLIBC_TUNABLES = "glibc.malloc.mmap_max=0:glibc.malloc.arena_max=1:glibc.malloc.trim_threshold=4611686018427387904"
_REEXEC_MARK = "LRA_FAST_ALLOC_APPLIED"

_threefry_unrolled = False


def _switched_on(variable: str, env: Mapping[str, str] | None = None) -> bool:
    value = (os.environ if env is None else env).get(variable, "1").strip().lower()
    return value not in ("0", "false", "off", "no")


def _is_glibc() -> bool:
    return sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def fast_allocator_wanted(env: Mapping[str, str] | None = None) -> bool:
    """Whether a process started with ``env`` should get the tunables (on glibc, unless switched off)."""
    return _is_glibc() and _switched_on(ALLOC_SWITCH, env)


def child_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with the allocator tunables added for a child that trains.
    A user's own ``GLIBC_TUNABLES`` is kept, ours appended after it."""
    out = dict(os.environ if env is None else env)
    if not fast_allocator_wanted(out):
        return out
    mine = out.get("GLIBC_TUNABLES", "")
    if GLIBC_TUNABLES not in mine:
        out["GLIBC_TUNABLES"] = f"{mine}:{GLIBC_TUNABLES}" if mine else GLIBC_TUNABLES
    out[_REEXEC_MARK] = "1"
    return out


def fast_allocator_active() -> bool:
    """Whether this process started with the tunables (they are read at start-up only)."""
    return _is_glibc() and GLIBC_TUNABLES in os.environ.get("GLIBC_TUNABLES", "")


def reexec_with_fast_allocator() -> None:
    """Re-execute this command once with the allocator tunables, before jax loads (a command line's
    first step). No-op when they are already in force, switched off, or not on glibc; a failed exec
    leaves the process running as it is, with one line of advice."""
    if not fast_allocator_wanted() or fast_allocator_active() or os.environ.get(_REEXEC_MARK):
        return
    argv = list(getattr(sys, "orig_argv", [])) or [sys.executable, *sys.argv]
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *argv[1:]], child_environment())
    except OSError as e:
        print(f"note: could not restart with the faster allocator settings ({e}); continuing with glibc's "
              f"defaults (slower, same numbers). {ALLOC_SWITCH}=0 silences this.", file=sys.stderr, flush=True)


def unroll_threefry_on_cpu() -> bool:
    """Register jax's unrolled threefry2x32 lowering for the CPU when ``LRA_UNROLLED_THREEFRY=1``
    (idempotent). Returns whether the unrolled lowering is in force; False when not asked for or when
    this jax has moved its internals.

    Off by default: the random bits are the same (a 300-step ConvLuna run's train losses and
    parameters matched to the bit), but XLA fuses the surrounding program differently, and 2 of its
    8 logged numbers (one 50-step loss mean, the validation loss) moved in the last float32 place:
    the suite promises logged numbers identical to jax's default path."""
    global _threefry_unrolled
    if _threefry_unrolled:
        return True
    if os.environ.get(THREEFRY_SWITCH, "0").strip().lower() not in ("1", "true", "on", "yes"):
        return False
    try:
        from jax._src.interpreters import mlir
        from jax._src.random import threefry2x32 as tf

        mlir.register_lowering(tf.threefry2x32_p, tf._threefry2x32_lowering_rule, platform="cpu")
    except (ImportError, AttributeError) as e:  # a jax that reorganised these modules: keep its default
        print(f"note: jax {_jax_version()} has no unrolled threefry lowering where lra looks for it ({e}); "
              "dropout uses jax's default CPU lowering (slower, same numbers)", file=sys.stderr, flush=True)
        return False
    _threefry_unrolled = True
    return True


def _jax_version() -> str:
    try:
        import jax

        return jax.__version__
    except ImportError:
        return "?"


def pin_process_to_core(core: int) -> int:
    """Pin every thread of this process (XLA's pool included) to CPU ``core``; returns how many
    threads were pinned. Call it after the first compilation, once XLA's threads exist."""
    pinned = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), {core})
            pinned += 1
        except (OSError, ValueError):  # a thread that ended meanwhile
            continue
    return pinned


def requested_core() -> int | None:
    """The core ``LRA_PIN_CORE`` asks for (None: no pinning), checked against this machine."""
    text = os.environ.get(PIN_VARIABLE, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) not in os.sched_getaffinity(0):
        raise ValueError(f"{PIN_VARIABLE}={text!r}: not a core this process may use "
                         f"(allowed: {sorted(os.sched_getaffinity(0))})")
    return int(text)


def settings() -> dict[str, object]:
    """What a run records about these knobs."""
    return {
        "fast_allocator": fast_allocator_active(),
        "unrolled_threefry": _threefry_unrolled,
        "pinned_core": os.environ.get(PIN_VARIABLE) or None,
    }
