"""Kernel launches of one execution of a compiled XLA program, counted from its optimised HLO text.

A GPU step costs at least a few microseconds per kernel the host launches, whatever the kernel
does; a program of thousands of small kernels is launch-bound (issue 50). XLA's GPU runtime runs
the optimised, scheduled HLO module as a thunk sequence, one thunk per instruction of the entry
computation that does work. This module rebuilds that count from the text of the compiled module
(``compiled.as_text()``), which a deviceless compile for a GPU target gives on a machine without
one (lra_lab.preflight), with these rules (XLA's GPU thunk emitter and runtime, checked against
``xla/backends/gpu/runtime/while_thunk.cc``):

* A ``fusion`` (a generated kernel, or a library fusion such as a cuBLAS or cuDNN call), a
  ``custom-call`` (cuBLAS GEMM, cuDNN attention, TopK, ...), an unfused ``copy``, ``sort`` or
  ``scatter``, a collective, any other instruction that computes: one launch. A library call that
  runs more than one kernel inside (a cuBLAS GEMM with a split-K reduction, a sort of a long
  dimension in several passes) still counts one: the count is a lower bound on kernels and an exact
  count of thunks.
* ``parameter``, ``constant``, ``tuple``, ``get-tuple-element``, ``bitcast`` and the other
  bookkeeping instructions in :data:`FREE`: none.
* ``while`` with a known trip count (its ``backend_config``'s ``known_trip_count``, which XLA
  sets where it can prove the count): the body's launches times the count; the condition is not
  run (WhileThunk skips it). Without one: the body once and the condition twice, plus the loop
  is listed in ``unknown_trip_loops`` (each iteration also waits for the host: a copy of the
  predicate and a synchronisation), so the count is a lower bound and says so.
* ``conditional``: the largest branch (an upper bound for one execution), listed in
  ``conditionals``.
* ``call`` to a computation XLA's command-buffer pass made (named ``command_buffer...``, the HLO
  pass of older XLA versions): one graph launch (a CUDA graph) that runs the computation's kernels
  on the device; ``call`` otherwise (the CPU's small calls): its computation's launches, inline.
  The XLA of jaxlib 0.10.2 forms command buffers later, from the thunk sequence (its
  ``command_buffer_conversion_pass``), and neither the compiled HLO nor the thunk sequence XLA
  dumps shows them (checked with ``--xla_gpu_enable_command_buffer=FUSION,CUBLASLT,WHILE
  --xla_gpu_graph_min_graph_size=1`` on a deviceless H100 compile): there, ``graph_launches`` is 0
  and ``kernels`` is what the device runs, whatever the runtime then graphs.

Counts are of one execution of the entry computation: ``kernels`` (every kernel the device runs,
inside graphs or not), ``graph_launches`` (command buffers launched), ``host_launches`` (what the
host issues: kernels outside graphs plus graph launches), and, by the same multiplication, the
``while_loops``, ``sorts``, ``scatters`` and ``custom_calls`` executed (``*_static`` for the number
of such instructions in the program, each counted once).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from typing import Any

# Instructions the GPU runtime runs no kernel for (buffer aliasing, tuples, control edges).
FREE = frozenset(
    {
        "parameter",
        "constant",
        "tuple",
        "get-tuple-element",
        "bitcast",
        "after-all",
        "add-dependency",
        "opt-barrier",
        "domain",
        "partition-id",
        "replica-id",
        "copy-done",
        "send-done",
        "recv-done",
        "all-reduce-done",
        "all-gather-done",
        "collective-permute-done",
        "async-done",
        "async-update",
    }
)
COMMAND_BUFFER_PREFIX = "command_buffer"

_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*)?\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_OPCODE = re.compile(r"\s*([a-z][\w\-]*)\(")
_CALLEE = re.compile(r"\b(calls|to_apply|condition|body|true_computation|false_computation)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"\bbranch_computations=\{([^}]*)\}")
_TRIP = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)"?')


@dataclasses.dataclass
class Instruction:
    name: str
    opcode: str
    callees: dict[str, str]  # role (calls, body, condition, to_apply, ...) -> computation
    branches: list[str]
    trip_count: int | None  # a while's known trip count
    text: str


@dataclasses.dataclass
class Module:
    computations: dict[str, list[Instruction]]
    entry: str


def _skip_shape(rest: str) -> str:
    """The text after an instruction's result shape (``f32[8]{0}`` or a nested tuple ``(s32[], ...)``)."""
    rest = rest.lstrip()
    if not rest.startswith("("):
        return rest.split(" ", 1)[1] if " " in rest else ""
    depth = 0
    for i, ch in enumerate(rest):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return rest[i + 1 :]
    raise ValueError(f"unbalanced tuple shape in {rest[:80]!r}")


def parse(hlo_text: str) -> Module:
    """The computations of an HLO module's text and the name of its entry computation."""
    computations: dict[str, list[Instruction]] = {}
    entry = ""
    current: list[Instruction] | None = None
    for line in hlo_text.splitlines():
        stripped = line.strip()
        if current is None:
            m = _COMPUTATION.match(stripped)
            if m and not stripped.startswith("HloModule"):
                current = computations.setdefault(m.group(2), [])
                if m.group(1):
                    entry = m.group(2)
            continue
        if stripped == "}":
            current = None
            continue
        m = _INSTRUCTION.match(line)
        if not m:
            continue
        after = _skip_shape(m.group(3))
        op = _OPCODE.match(after)
        if not op:
            continue
        branches = _BRANCHES.search(after)
        trip = _TRIP.search(after)
        current.append(
            Instruction(
                name=m.group(2),
                opcode=op.group(1),
                callees={role: callee for role, callee in _CALLEE.findall(after)},
                branches=[b.strip().lstrip("%") for b in branches.group(1).split(",")] if branches else [],
                trip_count=int(trip.group(1)) if trip else None,
                text=after,
            )
        )
    if not entry:
        raise ValueError("no ENTRY computation in the HLO text")
    return Module(computations, entry)


@dataclasses.dataclass
class Counts:
    """Launches and the like of one execution of a computation (see the module docstring)."""

    kernels: int = 0
    graph_launches: int = 0
    kernels_in_graphs: int = 0
    while_loops: int = 0
    sorts: int = 0
    scatters: int = 0
    custom_calls: int = 0
    unknown_trip_loops: list[str] = dataclasses.field(default_factory=list)
    conditionals: list[str] = dataclasses.field(default_factory=list)
    kernels_by_opcode: Counter[str] = dataclasses.field(default_factory=Counter)

    def add(self, other: Counts, times: int = 1, in_graph: bool = False) -> None:
        self.kernels += other.kernels * times
        self.graph_launches += other.graph_launches * times
        self.kernels_in_graphs += (other.kernels if in_graph else other.kernels_in_graphs) * times
        self.while_loops += other.while_loops * times
        self.sorts += other.sorts * times
        self.scatters += other.scatters * times
        self.custom_calls += other.custom_calls * times
        self.unknown_trip_loops += [x for x in other.unknown_trip_loops if x not in self.unknown_trip_loops]
        self.conditionals += [x for x in other.conditionals if x not in self.conditionals]
        for k, v in other.kernels_by_opcode.items():
            self.kernels_by_opcode[k] += v * times

    @property
    def host_launches(self) -> int:
        return self.kernels - self.kernels_in_graphs + self.graph_launches


def _inside(module: Module, computation: str, opcode: str) -> int:
    """How many ``opcode`` instructions a fused computation holds (a scatter or sort fused into a kernel)."""
    count = 0
    for ins in module.computations.get(computation, []):
        count += ins.opcode == opcode
        if ins.opcode == "fusion" and "calls" in ins.callees:
            count += _inside(module, ins.callees["calls"], opcode)
    return count


def count(module: Module, computation: str | None = None) -> Counts:
    """The counts of one execution of ``computation`` (default: the entry)."""
    memo: dict[str, Counts] = {}

    def visit(name: str) -> Counts:
        if name in memo:
            return memo[name]
        total = Counts()
        for ins in module.computations[name]:
            op = ins.opcode
            if op in FREE:
                continue
            if op == "while":
                body, cond = visit(ins.callees["body"]), visit(ins.callees["condition"])
                one = Counts(while_loops=1)
                total.add(one)
                if ins.trip_count is not None:
                    total.add(body, ins.trip_count)
                else:  # one iteration counted: a lower bound, said so
                    total.add(body)
                    total.add(cond, 2)
                    total.unknown_trip_loops.append(ins.name)
                continue
            if op == "conditional":
                names = ins.branches or [
                    ins.callees[r] for r in ("true_computation", "false_computation") if r in ins.callees
                ]
                branches = [visit(b) for b in names]
                total.add(max(branches, key=lambda c: c.kernels), 1)  # the predicate's copy to the host: not a kernel
                total.conditionals.append(ins.name)
                continue
            if op == "call":
                callee = ins.callees.get("to_apply", "")
                inner = visit(callee)
                if callee.startswith(COMMAND_BUFFER_PREFIX):
                    total.add(inner, in_graph=True)
                    total.graph_launches += 1
                else:
                    total.add(inner)
                continue
            if op in ("async-start", "copy-start", "send", "recv"):
                op = op.replace("-start", "")
            fused = ins.callees.get("calls") if op == "fusion" else None
            total.kernels += 1
            total.kernels_by_opcode[op] += 1
            total.sorts += op == "sort" or (fused is not None and _inside(module, fused, "sort") > 0)
            total.scatters += op == "scatter" or (fused is not None and _inside(module, fused, "scatter") > 0)
            total.custom_calls += op == "custom-call"
        memo[name] = total
        return total

    return visit(computation or module.entry)


def static_counts(module: Module) -> dict[str, int]:
    """How many while loops, sorts and scatters the program holds (each once, wherever it is)."""
    ops: Counter[str] = Counter(ins.opcode for comp in module.computations.values() for ins in comp)
    return {"while_loops_static": ops["while"], "sorts_static": ops["sort"], "scatters_static": ops["scatter"]}


def summary(hlo_text: str) -> dict[str, Any]:
    """The record of one compiled program: the counts per step and the program's static counts."""
    module = parse(hlo_text)
    c = count(module)
    return {
        "kernels": c.kernels,
        "host_launches": c.host_launches,
        "graph_launches": c.graph_launches,
        "kernels_in_graphs": c.kernels_in_graphs,
        "while_loops": c.while_loops,
        "sorts": c.sorts,
        "scatters": c.scatters,
        "custom_calls": c.custom_calls,
        "unknown_trip_loops": len(c.unknown_trip_loops),
        "conditionals": len(c.conditionals),
        "kernels_by_opcode": dict(c.kernels_by_opcode.most_common()),
        **static_counts(module),
        "instructions": sum(len(v) for v in module.computations.values()),
    }


if __name__ == "__main__":  # python -m lra_lab.bench.hlo_launches FILE.hlo: the counts of a dumped module
    import sys

    print(json.dumps(summary(open(sys.argv[1]).read()), indent=2))
