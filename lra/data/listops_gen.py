"""The ListOps generator: LRA's algorithm and string form, an endless stream of unique examples (see listops.py)."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator, Sequence

from lra.data.listops_format import END, MAX_ARGS, MAX_DEPTH, OPERATOR_P, OPERATORS
from lra.data.types import DataError


def apply_operator(op: int, args: Sequence[int]) -> int:
    """Value of ``OPERATORS[op]`` applied to ``args`` (digits), with LRA's conventions."""
    if op == 0:
        return min(args)
    if op == 1:
        return max(args)
    if op == 2:  # int(np.median(args)): mean of the two middle values for an even count
        s = sorted(args)
        half = len(s) // 2
        return s[half] if len(s) % 2 else (s[half - 1] + s[half]) // 2
    return sum(args) % 10


# A tree is a list of codes, one per token, carrying what LRA's string needs: digit d -> d; an operator with k
# arguments -> _op_code(op, k) (k + 1 "("); its "]" -> _END_CODE (root) or _END_ARG_CODE (an argument: one more ")").
_END_CODE = -1
_END_ARG_CODE = -2


def _op_code(op: int, num_args: int) -> int:
    return 1000 * (op + 1) + num_args  # distinct for num_args < 1000


def sample_tree(
    rand: Callable[[], float], max_len: int, max_depth: int = MAX_DEPTH, max_args: int = MAX_ARGS
) -> tuple[list[int], int] | None:
    """One tree as (codes, value), or None once it reaches ``max_len`` tokens (callers check length)."""
    codes: list[int] = []
    append = codes.append
    open_ops: list[list[int]] = []  # [arguments still to come, operator, start in values]
    values: list[int] = []  # argument values of the open operators, innermost last
    arg_choices = max_args - 1  # randint(2, max_args)
    depth = 1
    while True:
        u = rand()
        if depth < max_depth and u < OPERATOR_P:
            v = u * (1.0 / OPERATOR_P) * arg_choices  # uniform on [0, arg_choices)
            extra = int(v)
            op = int((v - extra) * len(OPERATORS))
            append(_op_code(op, 2 + extra))
            open_ops.append([2 + extra, op, len(values)])
            depth += 1
            continue
        if depth < max_depth:
            u = (u - OPERATOR_P) / (1.0 - OPERATOR_P)
        digit = min(int(u * 10), 9)
        append(digit)
        values.append(digit)
        while open_ops:  # close every operator whose last argument this digit completed
            top = open_ops[-1]
            top[0] -= 1
            if top[0]:
                break
            open_ops.pop()
            append(_END_ARG_CODE if open_ops else _END_CODE)
            depth -= 1
            start = top[2]
            value = apply_operator(top[1], values[start:])
            del values[start:]
            values.append(value)
        else:
            return codes, values[0]
        if len(codes) >= max_len:
            return None


def _pieces(max_args: int) -> dict[int, str]:
    """Code -> its text in LRA's ``to_string``: ((...((op, a1), a2)..., ak), "]"), a pair written "( x y )", so
    k + 1 "(" before the operator and a ")" after each argument (a nested operator's after its "] )") and "]"."""
    pieces = {d: f"{d} )" for d in range(10)}
    pieces[_END_CODE] = f"{END} )"
    pieces[_END_ARG_CODE] = f"{END} ) )"
    for op, name in enumerate(OPERATORS):
        for k in range(2, max_args + 1):
            pieces[_op_code(op, k)] = "( " * (k + 1) + name
    return pieces


def _render(codes: Sequence[int], pieces: Callable[[int], str]) -> str:
    if len(codes) == 1:  # a lone digit is no argument: no ")"
        return str(codes[0])
    return " ".join(map(pieces, codes))


def to_string(codes: Sequence[int], max_args: int = MAX_ARGS) -> str:
    """The tree as LRA's ``to_string`` writes it, e.g. ``( ( ( [MAX 2 ) 9 ) ] )``."""
    return _render(codes, _pieces(max_args).__getitem__)


def generate(
    min_len: int, max_len: int, seed: int, max_depth: int = MAX_DEPTH, max_args: int = MAX_ARGS
) -> Iterator[tuple[str, int]]:
    """Endless stream of unique (source string, label) with ``min_len < length < max_len``."""
    rand = random.Random(seed).random
    pieces = _pieces(max_args).__getitem__
    seen: set[bytes] = set()  # 16-byte digests: the full strings of 100k trees take ~600 MB
    misses = 0  # consecutive trees not kept: catches limits that admit (almost) no tree
    while True:
        tree = sample_tree(rand, max_len, max_depth, max_args)
        if tree is not None and min_len < len(tree[0]) < max_len:
            source = _render(tree[0], pieces)
            digest = hashlib.blake2b(source.encode(), digest_size=16).digest()
            if digest not in seen:
                seen.add(digest)
                misses = 0
                yield source, tree[1]
                continue
        misses += 1
        if misses > 10_000_000:
            raise DataError(
                f"ListOps generator: 10M trees in a row gave no new example with "
                f"{min_len} < length < {max_len} (after {len(seen)} examples); widen "
                f"--config.data.min_len/max_len or ask for fewer examples"
            )
