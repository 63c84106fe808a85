"""Golden records (tests/golden/*.json) and how a run is checked against one (test-only code).

XLA's CPU code depends on the host: LLVM picks instructions and vector widths from the CPU's
instruction set and model (``--xla_cpu_max_isa`` caps the set), so the same jax/jaxlib gives
float32 results that differ in the last bits from one x86 CPU to another (a loss of 2.3708436489
against 2.3708438873 on an AVX2-only CPU). A record therefore carries the :func:`fingerprint` of
the machine that wrote it, and a check runs in one of two modes:

* ``exact``: this machine's fingerprint equals the record's; every value must be equal to the bit
  (the refactor guard of issue 40: a change in the last bit fails);
* ``tolerance``: another machine (or a record without a fingerprint); ints and strings must be
  equal, floats within ``RTOL`` relative (``ATOL`` near zero). Measured: other instruction sets
  (``--xla_cpu_max_isa=AVX2``, ``SSE4_2``) move the smoke losses by at most ~1e-6 relative; a real
  numeric change moves them far more (``tests/test_golden.py::test_tolerance_fails_a_real_change``:
  a 1e-3 relative change of the loss, a changed initialisation).

Each check says its mode in its failure message and in the test run's summary line
(conftest.py, ``golden records: ...``). After a deliberate numeric change or a jax upgrade,
regenerate the records on one machine and say why in the commit:

    LRA_WRITE_GOLDEN=1 python -m pytest -q -m "slow or not slow" tests/test_golden.py tests/test_bf16.py
"""

from __future__ import annotations

import json
import math
import os
import platform
import shlex
from pathlib import Path
from typing import Any

from lra.train import cpu_identity

GOLDEN = Path(__file__).parent / "golden"
_COMMITTED = GOLDEN  # the records the summary counts (tests may point GOLDEN elsewhere)
RTOL, ATOL = 1e-4, 1e-7
WRITE_ENV = "LRA_WRITE_GOLDEN"
WRITE_COMMAND = 'LRA_WRITE_GOLDEN=1 python -m pytest -q -m "slow or not slow" tests/test_golden.py tests/test_bf16.py'

MODES: list[str] = []  # the modes of the test running now's checks of tests/golden (conftest.py reports them)


def fingerprint() -> dict[str, Any]:
    """What decides a CPU program's bits: jax/jaxlib, the architecture, the CPU (vendor, family
    and model, as LLVM reads them to pick its target), its instruction-set flags, the CPU count
    (XLA's thread pool splits work by it) and XLA_FLAGS (``--xla_cpu_max_isa`` and the like)."""
    import jax
    import jaxlib

    cpu, isa = cpu_identity()
    return {
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "arch": platform.machine(),
        "cpu": cpu,
        "isa": isa,
        "cpus": os.cpu_count(),
        "xla_flags": sorted(shlex.split(os.environ.get("XLA_FLAGS", ""))),
    }


def writing() -> bool:
    return os.environ.get(WRITE_ENV) == "1"


def check(path: Path, got: dict[str, Any], what: str, family: str) -> None:
    """``got`` equals the record at ``path`` (exact on the record's machine, within the tolerance
    elsewhere); with ``LRA_WRITE_GOLDEN=1`` it becomes the record, with this machine's fingerprint."""
    if writing():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"machine": fingerprint(), **got}, indent=1) + "\n")
    if not path.exists():
        raise AssertionError(
            f"no golden record for {family}'s {what} ({path}): a new family writes its records once, "
            f"on one machine, and commits them with the family (docs/adding_a_family.md, step 4): "
            f"{WRITE_COMMAND} -k {family}"
        )
    record = json.loads(path.read_text())
    mode, why = mode_for(record.get("machine"))
    want = {k: v for k, v in record.items() if k in got}
    problems = differences(got, want, exact=mode == "exact")
    if path.parent == _COMMITTED:  # the summary also counts the tolerance checks that were exact
        MODES.append("bit-equal" if mode == "tolerance" and not differences(got, want, exact=True) else mode)
    assert not problems, (
        f"{family}: {what} differ from {path} (mode {mode}: {why}):\n  "
        + "\n  ".join(problems[:8])
        + ("\n  ..." if len(problems) > 8 else "")
        + f"\nIf the change is deliberate, regenerate the records and say why in the commit: {WRITE_COMMAND}"
    )


def mode_for(recorded: dict[str, Any] | None) -> tuple[str, str]:
    """("exact" | "tolerance", why) for a record written on the machine ``recorded``."""
    if recorded is None:
        return "tolerance", f"the record names no machine; floats within rtol {RTOL}"
    here = fingerprint()
    if recorded == here:
        return "exact", "this machine's fingerprint is the record's"
    keys = ", ".join(f"{k} {recorded.get(k)!r} here {here[k]!r}" for k in here if recorded.get(k) != here[k])
    return "tolerance", f"recorded on another machine ({keys}); floats within rtol {RTOL}"


def differences(got: Any, want: Any, exact: bool, where: str = "") -> list[str]:
    """Each place where ``got`` and ``want`` differ: any difference when ``exact``; otherwise a float
    beyond ``RTOL`` relative (``ATOL`` absolute near zero) or any other value not equal."""
    if isinstance(got, dict) and isinstance(want, dict):
        if got.keys() != want.keys():
            return [f"{where or 'record'}: fields {sorted(got)} != {sorted(want)}"]
        return [p for k in got for p in differences(got[k], want[k], exact, f"{where}.{k}" if where else k)]
    if isinstance(got, list) and isinstance(want, list):
        if len(got) != len(want):
            return [f"{where}: {len(got)} items != {len(want)}"]
        return [
            p for i, (g, w) in enumerate(zip(got, want, strict=True)) for p in differences(g, w, exact, f"{where}[{i}]")
        ]
    both_float = isinstance(got, float) and isinstance(want, float)
    if got == want or (both_float and not exact and math.isclose(got, want, rel_tol=RTOL, abs_tol=ATOL)):
        return []
    rel = f" (relative {abs(got - want) / max(abs(want), 1e-30):.2e})" if both_float else ""
    return [f"{where}: {got!r} != {want!r}{rel}"]


def check_steps(family: str, losses: list[float]) -> None:
    """The bare model's float32 smoke losses (tests/test_bf16.py) against ``steps_<family>.json``."""
    check(GOLDEN / f"steps_{family}.json", {"losses": losses}, "float32 step losses", family)
