"""CPU speed settings that leave every computed number bit-identical: the allocator, one-pass threefry, pinning.

Each is on for processes that train, off via its variable, recorded in ``result.json``'s ``speed_settings``; the
user's view: docs/running.md ("CPU speed settings"); fault counts: results/bench/allocators_60steps.md.

* ``LRA_FAST_ALLOC``: glibc maps and unmaps XLA's large per-step buffers, so the kernel zeroes the working set every
  step (up to a third of it in minor faults). mimalloc (the ``cmeel-mimalloc`` wheel's, ``LD_PRELOAD``,
  ``MIMALLOC_PURGE_DELAY=-1``) reuses them, else glibc tunables do most of it; both are read at process start, hence
  :func:`reexec_with_fast_allocator` and :func:`child_environment`.
* ``LRA_UNROLLED_THREEFRY``: jax's CPU threefry2x32 is a rolled 5-iteration loop XLA cannot fuse (17-29% of a step
  with dropout). jax's unrolled lowering is fused *into* the float ops that read the bits, which XLA then groups
  differently: numbers move in the last float32 place (an ``optimization_barrier`` is dropped before fusion on CPU).
  :func:`_one_pass` runs all 20 rounds in a ``while`` loop that runs once but whose condition XLA cannot prove
  (``any(d == d + 1)``): a fusion boundary where jax's loop has one, so the program around it compiles as before.
  No public API allows this: :func:`register` touches ``jax._src`` (nowhere else in lra does); when a jax upgrade
  moves it, jax's default stays and ``tests/test_cpu_speed.py`` fails loudly.
* ``LRA_PIN_CORE=N``: pin *after* XLA has started its intra-op threads (:func:`pin_process_to_core`), so a run keeps
  its two threads; ``taskset`` at start-up would give XLA one thread and move the losses by an ulp.
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

ALLOC_SWITCH = "LRA_FAST_ALLOC"
THREEFRY_SWITCH = "LRA_UNROLLED_THREEFRY"
PIN_VARIABLE = "LRA_PIN_CORE"
# trim_threshold is a size_t: 2**62 is "never".
GLIBC_TUNABLES = "glibc.malloc.mmap_max=0:glibc.malloc.arena_max=1:glibc.malloc.trim_threshold=4611686018427387904"
_REEXEC_MARK = "LRA_FAST_ALLOC_APPLIED"
MIMALLOC_WHEEL = "cmeel-mimalloc"
MIMALLOC_SETTINGS = {"MIMALLOC_PURGE_DELAY": "-1"}  # never hand freed memory back (it would fault in again next step)

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
    """``env`` (default: this process's) plus the allocator settings, beside a user's own, for a child that trains."""
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
    """The allocator this process runs with: ``mimalloc``, ``glibc-tunables`` or ``default``."""
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
    """Re-execute this command once with the allocator settings, before jax loads; a failed exec just continues."""
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
    """``LRA_UNROLLED_THREEFRY``: ``one-pass`` (default), ``rolled`` (``0``) or ``fused`` (``1``, not bit-identical)."""
    value = (os.environ if env is None else env).get(THREEFRY_SWITCH, "").strip().lower()
    if value in ("", "one-pass", "onepass", "default"):
        return "one-pass"
    if value in ("0", "false", "off", "no", "rolled"):
        return "rolled"
    if value in ("1", "true", "on", "yes", "fused", "unrolled"):
        return "fused"
    raise InputError(f"{THREEFRY_SWITCH}={value!r}: one-pass (default), 0/rolled or 1/fused")


def unroll_threefry_on_cpu() -> bool:
    """Register ``LRA_UNROLLED_THREEFRY``'s lowering before the first compile; whether one faster than jax's is on."""
    global _threefry_unrolled

    mode = threefry_mode()
    register(mode)
    _threefry_unrolled = registered() == "fused"
    return registered() != "rolled"


def pin_process_to_core(core: int) -> int:
    """Pin every thread of this process to ``core`` after the first compile (once XLA's threads exist); the count."""
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
    """Register ``mode``'s CPU threefry2x32 lowering; whether it is in force (False, with a note: jax moved it)."""
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
