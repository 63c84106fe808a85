"""JAX's persistent compilation cache for runs: a resume (or a rerun) loads its compiled steps.

A run compiles one train step per length bucket and its evaluation steps (tens of seconds on a
CPU, minutes at paper scale); without a persistent cache every resume compiles them again. The
command line (``python -m lra.train``, and so every sweep and study that launches it) turns JAX's
cache on, in this order:

* ``JAX_COMPILATION_CACHE_DIR`` set: JAX's own setting, left as it is (the test suite's folder);
* ``LRA_COMPILATION_CACHE=off`` (or ``0``, ``none``, empty): no persistent cache;
* ``LRA_COMPILATION_CACHE=DIR``: that folder;
* otherwise ``$XDG_CACHE_HOME/lra/jax`` (``~/.cache/lra/jax``).

Under that folder each machine has its own subfolder (:func:`machine_key`: jaxlib, the
architecture, the CPU and its instruction-set flags), so a home shared by a cluster's different
nodes never hands one CPU another's code. A loaded program is the compiled one: results are the
same bits. Library calls (``lra.training.train_and_evaluate``) leave JAX's settings alone.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
from pathlib import Path

ENV = "LRA_COMPILATION_CACHE"
OFF = ("", "0", "off", "none", "false")
# The CPU features LLVM's code generation reads (x86 vector and matrix extensions, Arm's SIMD).
_ISA_FLAG = re.compile(r"^(sse4|avx|fma|f16c|amx|asimd|sve|neon|bf16|i8mm|fphp)")


def cpu_identity() -> tuple[str, list[str]]:
    """(the CPU as LLVM identifies it: vendor, family, model; its instruction-set flags), from
    /proc/cpuinfo's first processor on Linux; elsewhere ``platform.processor()`` and no flags."""
    try:
        text = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    except OSError:
        return platform.processor(), []
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in text.splitlines() if ":" in line)}
    ident = " ".join(fields.get(k, "") for k in ("vendor_id", "cpu family", "model", "CPU implementer", "CPU part"))
    flags = (fields.get("flags") or fields.get("Features") or "").split()
    return " ".join(ident.split()), sorted(f for f in flags if _ISA_FLAG.match(f))


def machine_key() -> str:
    """A folder name for this machine's compiled programs: ``<arch>-<12 hex digits>``."""
    import jaxlib

    cpu, isa = cpu_identity()
    text = "|".join([jaxlib.__version__, platform.machine(), cpu, *isa])
    return f"{platform.machine()}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def cache_dir(environ: dict[str, str] | None = None) -> Path | None:
    """The folder a run's compiled programs go to, or None (off, or JAX's own setting rules)."""
    env = os.environ if environ is None else environ
    if env.get("JAX_COMPILATION_CACHE_DIR"):
        return None
    chosen = env.get(ENV)
    if chosen is not None and chosen.strip().lower() in OFF:
        return None
    if chosen:
        root = Path(chosen).expanduser()
    else:
        root = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lra" / "jax"
    return root / machine_key()


def enable() -> Path | None:
    """Turn JAX's persistent compilation cache on for this process (see the module docstring);
    the folder used, or None. A folder that cannot be made leaves the cache off (a run never
    fails for its cache)."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    import jax

    jax.config.update("jax_compilation_cache_dir", str(folder))
    return folder
