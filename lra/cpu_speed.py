"""CPU speed settings in one module outside the training package: the allocator, one-pass threefry and
pinning. Who opts in: ``python -m lra.train`` re-executes itself with the allocator settings and the
runners that start training processes pass them on (``child_environment``); ``train_and_evaluate``
registers the threefry lowering ``LRA_UNROLLED_THREEFRY`` asks for, pins to ``LRA_PIN_CORE`` and
records ``settings()``. Each is switched off by its variable (below).

Sections, in order: the allocator, pinning and the recorded settings; the one-pass threefry
lowering (the one use of ``jax._src``). Nothing here changes a computed number.

CPU speed settings that leave every computed number bit-identical.

Three knobs, each on by default for processes that train, each measured and recorded in the run
(``result.json``'s ``speed_settings``):

* **allocator** (``LRA_FAST_ALLOC``): XLA's CPU runtime takes its per-step buffers from glibc
  ``malloc``. Buffers above the mmap threshold are mapped and unmapped every step, so the kernel
  zeroes the whole working set again each step: up to a third of the step's CPU time in minor page
  faults. By default a training process runs with **mimalloc** preloaded (``LD_PRELOAD`` of the
  ``libmimalloc.so`` that the ``cmeel-mimalloc`` wheel ships, a dependency of ``lra`` on Linux; no
  root) and told never to return freed memory to the kernel (``MIMALLOC_PURGE_DELAY=-1``): it keeps
  and reuses the buffers. Where that library is missing, glibc's own tunables do most of it
  (``mmap_max=0`` serves every block from the heap, ``arena_max=1`` keeps XLA's threads off
  per-thread arenas, whose heaps are mapped and unmapped as wholes, and a huge ``trim_threshold``
  stops freed memory going back to the kernel), with one line of advice. Measured in 60-step
  ``lra.train`` runs (minor faults per step, whole process: default / glibc tunables / mimalloc):
  ConvLuna-16 :reference 32.5k / 4.0k / 0.76k, Luna-16 :reference 50.8k / 5.9k / 0.73k, the same test
  loss to the bit (``results/bench/allocators_60steps.md``; whole-run speed: ``results/bench/laptop_*.md``).
  Both are read at process start, so a command re-executes itself once with them
  (:func:`reexec_with_fast_allocator`) and parents pass them to children (:func:`child_environment`).
  ``LRA_FAST_ALLOC=glibc`` picks the tunables, ``LRA_FAST_ALLOC=0``
  neither.
* **one-pass threefry** (``LRA_UNROLLED_THREEFRY``; default ``one-pass``): jax lowers the
  threefry2x32 hash on CPU as a rolled 5-iteration loop that XLA cannot fuse; dropout's random bits
  then cost 17-29% of the step. :mod:`lra.cpu_speed` computes all rounds in one pass
  behind the same fusion boundary, bit-identical (the module says why jax's own unrolled lowering is
  not: ``LRA_UNROLLED_THREEFRY=1`` or ``fused`` opts into it, faster, logged numbers move by an ulp;
  ``0`` or ``rolled`` keeps jax's). It is the one place that touches ``jax._src``; a jax upgrade that
  moves it leaves jax's default in force, and ``tests/test_cpu_speed.py`` fails loudly then.
* **pinning** (``LRA_PIN_CORE=N``): runners that start two programs at once pin each to its own
  core *after* XLA has started its intra-op threads (:func:`pin_process_to_core`), so each keeps
  its two threads and computes exactly what an unpinned run does. ``taskset -c N`` at start-up
  would give XLA one thread and change the losses at ulp level.

``LRA_FAST_ALLOC=0`` switches the allocator settings off (``glibc``: the tunables, not mimalloc);
``LRA_UNROLLED_THREEFRY=0`` keeps jax's rolled threefry loop, ``=1`` picks jax's fused unrolled one.

Dropout's random bits on the CPU in one pass, bit-identical to jax's default lowering.

jax lowers the threefry2x32 hash on CPU as a rolled 5-iteration ``fori_loop`` (4 rounds each):
every iteration is a pass over the whole array, and the loop cannot be fused. jax's unrolled
lowering (the one it uses on GPU/TPU) computes the same integers in one fused pass, but it is then
fused *into* the float computations that consume the bits (the dropout masks inside the attention
and residual fusions), XLA groups those float operations differently, and logged numbers move in the
last float32 place (a 30-step smoke run: different parameters after the first step, the same bits).
An ``optimization_barrier`` does not stop that on CPU (XLA removes barriers before fusion).

Here all 20 rounds run in one pass inside a ``while`` loop that XLA cannot count: it runs once,
but its condition starts from a value XLA cannot prove (``any(d == d + 1)``, always False). The loop
is a fusion boundary exactly where jax's rolled loop is one, so the float program around it is
compiled as before and every number stays the same, while the hash is computed in one pass instead
of five. jax has no public API for this: :func:`register` touches ``jax._src`` and returns False
(jax's default stays) when a jax upgrade moves what it needs; ``tests/test_cpu_speed.py`` then fails
loudly, and compares 20 logged losses with and without it.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from lra.errors import InputError

# -- allocator, pinning and the settings a run records -------------------------------------------------------


ALLOC_SWITCH = "LRA_FAST_ALLOC"
THREEFRY_SWITCH = "LRA_UNROLLED_THREEFRY"
PIN_VARIABLE = "LRA_PIN_CORE"
# trim_threshold is a size_t: 2**62 is "never"; mmap_max=0 and arena_max=1 as explained above.
GLIBC_TUNABLES = "glibc.malloc.mmap_max=0:glibc.malloc.arena_max=1:glibc.malloc.trim_threshold=4611686018427387904"
_REEXEC_MARK = "LRA_FAST_ALLOC_APPLIED"
MIMALLOC_WHEEL = "cmeel-mimalloc"
# mimalloc's own setting: never give freed memory back to the kernel (it would fault it in again next step).
MIMALLOC_SETTINGS = {"MIMALLOC_PURGE_DELAY": "-1"}

_threefry_unrolled = False


def _switched_on(variable: str, env: Mapping[str, str] | None = None) -> bool:
    value = (os.environ if env is None else env).get(variable, "1").strip().lower()
    return value not in ("0", "false", "off", "no")


def _is_glibc() -> bool:
    return sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def fast_allocator_wanted(env: Mapping[str, str] | None = None) -> bool:
    """Whether a process started with ``env`` should get a faster allocator (on glibc, unless switched off)."""
    return _is_glibc() and _switched_on(ALLOC_SWITCH, env)


@lru_cache(maxsize=1)
def mimalloc_library() -> Path | None:
    """The ``libmimalloc.so`` of the installed ``cmeel-mimalloc`` wheel, or None."""
    try:
        dist = importlib.metadata.distribution(MIMALLOC_WHEEL)
    except importlib.metadata.PackageNotFoundError:
        return None
    for name in sorted(str(f) for f in dist.files or () if Path(str(f)).name == "libmimalloc.so"):
        path = Path(str(dist.locate_file(name))).resolve()
        if path.is_file():
            return path
    return None


def chosen_allocator(env: Mapping[str, str] | None = None) -> str:
    """``mimalloc``, ``glibc-tunables`` or ``default``: what a training process started with ``env`` gets."""
    env = os.environ if env is None else env
    if not fast_allocator_wanted(env):
        return "default"
    if env.get(ALLOC_SWITCH, "").strip().lower() == "glibc" or mimalloc_library() is None:
        return "glibc-tunables"
    return "mimalloc"


def child_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with the allocator settings added for a child that trains.
    A user's own ``LD_PRELOAD``, ``GLIBC_TUNABLES`` and ``MIMALLOC_*`` are kept, ours added beside them."""
    out = dict(os.environ if env is None else env)
    kind = chosen_allocator(out)
    if kind == "default":
        return out
    if kind == "mimalloc":
        library = str(mimalloc_library())
        preload = out.get("LD_PRELOAD", "").split()
        if library not in preload:
            out["LD_PRELOAD"] = " ".join([library, *preload])
        for name, value in MIMALLOC_SETTINGS.items():
            out.setdefault(name, value)
    else:
        mine = out.get("GLIBC_TUNABLES", "")
        if GLIBC_TUNABLES not in mine:
            out["GLIBC_TUNABLES"] = f"{mine}:{GLIBC_TUNABLES}" if mine else GLIBC_TUNABLES
    out[_REEXEC_MARK] = "1"
    return out


def allocator_in_force() -> str:
    """The allocator this process runs with: ``mimalloc`` (loaded, as /proc/self/maps shows),
    ``glibc-tunables`` (read at start-up) or ``default``."""
    if not _is_glibc():
        return "default"
    try:
        if "libmimalloc" in Path("/proc/self/maps").read_text():
            return "mimalloc"
    except OSError:
        pass
    return "glibc-tunables" if GLIBC_TUNABLES in os.environ.get("GLIBC_TUNABLES", "") else "default"


def fast_allocator_active() -> bool:
    """Whether this process runs with a faster allocator (they are set up at start-up only)."""
    return allocator_in_force() != "default"


def reexec_with_fast_allocator() -> None:
    """Re-execute this command once with the allocator settings, before jax loads (a command line's
    first step). No-op when they are already in force, switched off, or not on glibc; without the
    mimalloc wheel, the glibc tunables and one line of advice; a failed exec leaves the process
    running as it is, with one line of advice."""
    if not fast_allocator_wanted() or os.environ.get(_REEXEC_MARK):
        return
    if chosen_allocator() == "glibc-tunables" and os.environ.get(ALLOC_SWITCH, "").strip().lower() != "glibc":
        print(
            f"note: {MIMALLOC_WHEEL} is not installed (pip install {MIMALLOC_WHEEL}); using glibc's allocator "
            f"tunables instead (slower, same numbers). {ALLOC_SWITCH}=glibc silences this.",
            file=sys.stderr,
            flush=True,
        )
    if allocator_in_force() == chosen_allocator():
        return
    argv = list(getattr(sys, "orig_argv", [])) or [sys.executable, *sys.argv]
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *argv[1:]], child_environment())
    except OSError as e:
        print(
            f"note: could not restart with the faster allocator settings ({e}); continuing with glibc's "
            f"defaults (slower, same numbers). {ALLOC_SWITCH}=0 silences this.",
            file=sys.stderr,
            flush=True,
        )


def threefry_mode(env: Mapping[str, str] | None = None) -> str:
    """The threefry lowering ``LRA_UNROLLED_THREEFRY`` asks for: ``one-pass`` (default), ``rolled``
    (``0``: jax's) or ``fused`` (``1``: jax's unrolled, not bit-identical)."""
    value = (os.environ if env is None else env).get(THREEFRY_SWITCH, "").strip().lower()
    if value in ("", "one-pass", "onepass", "default"):
        return "one-pass"
    if value in ("0", "false", "off", "no", "rolled"):
        return "rolled"
    if value in ("1", "true", "on", "yes", "fused", "unrolled"):
        return "fused"
    raise InputError(f"{THREEFRY_SWITCH}={value!r}: one-pass (default), 0/rolled or 1/fused")


def unroll_threefry_on_cpu() -> bool:
    """Register the threefry2x32 CPU lowering that ``LRA_UNROLLED_THREEFRY`` asks for (once per
    process, before the first compile). Returns whether a faster lowering than jax's is in force."""
    global _threefry_unrolled

    mode = threefry_mode()
    register(mode)
    _threefry_unrolled = registered() == "fused"
    return registered() != "rolled"


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
        raise InputError(
            f"{PIN_VARIABLE}={text!r}: not a core this process may use " f"(allowed: {sorted(os.sched_getaffinity(0))})"
        )
    return int(text)


def _threefry_in_force() -> str:
    return registered()


def settings() -> dict[str, object]:
    """What a run records about these knobs."""
    return {
        "fast_allocator": fast_allocator_active(),
        "allocator": allocator_in_force(),
        "unrolled_threefry": _threefry_unrolled,  # jax's fused lowering (not bit-identical)
        "threefry": _threefry_in_force(),
        "pinned_core": os.environ.get(PIN_VARIABLE) or None,
    }


# -- the one-pass threefry lowering --------------------------------------------------------------------------


MODES = ("one-pass", "rolled", "fused")
_registered: str | None = None


def _one_pass(k1: Any, k2: Any, x1: Any, x2: Any) -> list[Any]:
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax._src.random import threefry2x32 as tf

    key_mix = lax.bitwise_xor(k1, k2)
    done = jnp.any(key_mix == key_mix + np.uint32(1))  # always False; XLA cannot tell, so the loop stays

    def body(carry: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
        a, b = tf._threefry2x32_lowering(k1, k2, carry[0], carry[1], use_rolled_loops=False)
        return a, b, jnp.bool_(True)

    shape = jnp.broadcast_shapes(*(np.shape(v) for v in (k1, k2, x1, x2)))  # the output's (jax broadcasts them)
    start = (jnp.broadcast_to(x1, shape), jnp.broadcast_to(x2, shape), done)
    a, b, _ = lax.while_loop(lambda carry: ~carry[2], body, start)
    return [a, b]


def register(mode: str) -> bool:
    """Register ``mode``'s threefry2x32 lowering for the CPU (``rolled``: leave jax's). Returns whether
    it is in force; False, with one note, when this jax has moved its internals."""
    global _registered
    if mode not in MODES:
        raise InputError(f"threefry lowering {mode!r}: one of {', '.join(MODES)}")
    if mode == "rolled" or _registered is not None:  # once per process: the first compile uses it
        return _registered == (None if mode == "rolled" else mode)
    try:
        from jax._src.interpreters import mlir
        from jax._src.random import threefry2x32 as tf

        if mode == "fused":
            rule = tf._threefry2x32_lowering_rule
        else:
            tf._threefry2x32_lowering  # noqa: B018 (fails here, not at the first compile, when jax moved it)
            rule = mlir.lower_fun(_one_pass, multiple_results=True)
        mlir.register_lowering(tf.threefry2x32_p, rule, platform="cpu")
    except (ImportError, AttributeError) as e:  # a jax that reorganised these modules: keep its default
        import jax

        print(
            f"note: jax {jax.__version__} has no threefry lowering where lra looks for it ({e}); "
            "dropout uses jax's default CPU lowering (slower, same numbers)",
            file=sys.stderr,
            flush=True,
        )
        return False
    _registered = mode
    return True


def registered() -> str:
    """The CPU lowering in force in this process."""
    return _registered or "rolled"
