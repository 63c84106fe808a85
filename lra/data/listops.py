"""ListOps (LRA): nested MIN/MAX/MED/SM expressions over digits; the label is the value (10 classes).

Data come from the LRA release (``<data_dir>/lra_release/listops-1000/basic_{train,val,test}.tsv``)
or from a local seeded generator that follows the LRA generator's algorithm
(``lra_benchmarks/data/listops.py``) and writes the same TSV format, cached under
``<data_dir>/listops_generated/<limits, counts, seed>/``. Both go through one reader, whose token
arrays are cached (``lra.data.cache``: keyed by the split files' path, size and mtime and by
``max_len``; memory-mapped at load), so only the first load parses the TSVs.

The generator (LRA's algorithm, same distribution of kept trees):
  * the root has depth 1; a node at depth < 10 is an operator with probability 0.25, else a
    digit 0-9; at depth 10 always a digit. An operator (``[MIN``, ``[MAX``, ``[MED``, ``[SM``)
    has ``randint(2, 10)`` arguments and is closed by ``]``.
  * length = digits + operators + closing brackets; a tree is kept iff
    ``min_len < length < max_len`` (LRA: 500 < length < 2000). Examples are unique as strings;
    train, validation and test are consecutive slices of one stream of unique examples, so no
    example is in two splits.
  * values: MIN, MAX; MED = ``int(np.median(args))`` (LRA's convention: the mean of the two
    middle values for an even count, truncated); SM = sum mod 10.

Decisions, where this differs from LRA's code:
  * Speed (the full 96k/2k/2k set: ~1 CPU minute to generate, ~8 s to parse into the cache once,
    then milliseconds to load, memory-mapped): the tree is
    generated as its token sequence with an explicit stack (no recursion, no tuple trees), a
    tree is abandoned as soon as it reaches ``max_len`` tokens (rejection of independent trees,
    so the kept trees have the same distribution), and each node uses one uniform draw:
    conditioned on the branch taken, the rescaled draw is again uniform, and its leading
    mixed-radix digits give the number of arguments and the operator. The labels are computed
    while the tree is built. Seeded with ``random.Random(generator_seed)``: deterministic.
  * Tokens: parentheses are dropped (they only mirror LRA's binary tuple nesting) and ``]`` is a
    token of its own, which makes the expression unambiguous. This matches LRA's current input
    pipeline, which keeps ``]`` (renamed ``X`` before its tokenizer, which drops
    non-alphanumeric tokens); only its pre-2021 pipeline tokenized the raw ``]`` away, so those
    models never saw where an operator's arguments end.
  * An example longer than ``config.data.max_len`` is an error, not silently truncated.
  * No CLS token is added: with ``config.model.pooling == "cls"`` the model prepends its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

import ml_collections
import numpy as np

from lra.errors import InputError
from lra.data import cache
from lra.data.paths import data_dir, require_file
from lra.data.types import PAD_ID, DataError, Split, TaskData

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
END = "]"
# Fixed token ids: padding, the ten digits, the four operators, the closing bracket.
VOCAB: dict[str, int] = {
    "<pad>": PAD_ID,
    **{str(d): 1 + d for d in range(10)},
    **{op: 11 + i for i, op in enumerate(OPERATORS)},
    END: 15,
}
NUM_CLASSES = 10

MAX_DEPTH = 10  # LRA's generator constants
MAX_ARGS = 10
OPERATOR_P = 0.25

HEADER = "Source\tTarget"
SPLIT_FILES = {"train": "basic_train.tsv", "validation": "basic_val.tsv", "test": "basic_test.tsv"}
RELEASE_SUBDIR = Path("lra_release") / "listops-1000"
RELEASE_MAX_LEN = 2000  # the release keeps trees with fewer than 2000 tokens
GENERATED_SUBDIR = "listops_generated"
GENERATOR_VERSION = 1  # part of the cache folder name: bump when the generated data change
READER_VERSION = 1  # part of the token cache key: bump when the tokenisation changes


# ---------------------------------------------------------------------------------------------
# Generator


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


# A tree is a list of codes, one per token, that also carry what LRA's string needs: digit d -> d;
# an operator with k arguments -> _op_code(op, k) (k + 1 opening parentheses); its "]" ->
# _END_CODE for the root, _END_ARG_CODE for an operator that is an argument (one more ")").
_END_CODE = -1
_END_ARG_CODE = -2


def _op_code(op: int, num_args: int) -> int:
    return 1000 * (op + 1) + num_args  # distinct for num_args < 1000


def sample_tree(
    rand: Callable[[], float], max_len: int, max_depth: int = MAX_DEPTH, max_args: int = MAX_ARGS
) -> tuple[list[int], int] | None:
    """One tree as (codes, value), or None once it reaches ``max_len`` tokens (abandoned).

    A tree that ends exactly at its ``max_len``-th token is still returned: callers check length.
    """
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
    """Code -> its text in LRA's ``to_string`` form.

    LRA nests an operator with arguments a1..ak as ((...((op, a1), a2)..., ak), "]"), and writes
    a pair (x, y) as "( x y )": so k + 1 "(" before the operator, a ")" after each argument (a
    nested operator's after its own "] )") and after the "]".
    """
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


def generated_dir(root: Path, min_len: int, max_len: int, counts: Sequence[int], seed: int) -> Path:
    """Cache folder of one generated set: everything that determines its content is in the name."""
    n_train, n_val, n_test = counts
    name = f"v{GENERATOR_VERSION}_len{min_len}-{max_len}_n{n_train}-{n_val}-{n_test}_seed{seed}"
    return root / GENERATED_SUBDIR / name


def _say(message: str) -> None:
    print(f"ListOps: {message}", file=sys.stderr, flush=True)


def _complete(folder: Path) -> bool:
    return all((folder / f).is_file() for f in SPLIT_FILES.values())


def _release_present(folder: Path, fix: str) -> bool:
    """Whether the release's split files are all in ``folder``: False when none is.

    A partial release (some split files but not all) is an error, not "absent": falling back to
    a generated set would silently train on different data than the user put there.
    """
    missing = [folder / f for f in SPLIT_FILES.values() if not (folder / f).is_file()]
    if missing and len(missing) < len(SPLIT_FILES):
        raise DataError(
            f"partial ListOps release in {folder}: missing {', '.join(map(str, missing))}\n"
            f"  to fix: {fix}; or remove the folder's split files to use a generated set"
        )
    return not missing


def _remove_stale_temporaries(final: Path) -> None:
    """Temporary folders of this set left by killed generations on this host (they are big)."""
    host = socket.gethostname()
    for tmp in final.parent.glob(f".{final.name}.tmp-{host}-*"):
        pid = tmp.name.rsplit("-", 1)[1]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(tmp, ignore_errors=True)
        except PermissionError:  # alive, another user's
            pass


MANIFEST = "manifest.json"  # of a generated set: each file's rows and SHA-256, checked before tokenising


def _scan(path: Path, digest: bool) -> tuple[int, str | None]:
    """(rows after the header, SHA-256 if ``digest``) of a TSV, in one chunked pass (~0.4 s for
    the 600 MB paper-scale training file; only when the file is tokenised)."""
    lines, last, h = 0, b"\n", hashlib.sha256() if digest else None
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
            if h is not None:
                h.update(chunk)
    lines += last != b"\n"  # a last line without its newline (a file cut short) still counts
    return max(lines - 1, 0), h.hexdigest() if h is not None else None


def check_generated(folder: Path, counts: Sequence[int]) -> None:
    """Refuse a generated set whose files are not what its generation wrote: the rows its name
    promises (``counts``) and, when the set has one (sets generated since issue 26), the rows and
    SHA-256 of its manifest. A file cut short or edited would otherwise train silently."""
    manifest_path = folder / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
        if not isinstance(manifest, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise DataError(f"{manifest_path} is damaged ({e})\n  to fix: delete the folder {folder} (the next run "
                        f"generates the same set again)") from None
    for file, want_rows in zip(SPLIT_FILES.values(), counts):
        entry = manifest.get(file, {})
        rows, digest = _scan(folder / file, "sha256" in entry)
        problem = (f"holds {rows} examples, but the generated set promises {want_rows} (its folder name"
                   f"{' and ' + MANIFEST if entry else ''}): it was cut short or extended" if rows != want_rows
                   else "differs from what was generated (its SHA-256 is not the one in " + MANIFEST + ")"
                   if digest is not None and digest != entry["sha256"] else None)
        if problem:
            raise DataError(f"generated ListOps file {folder / file} {problem}\n  to fix: delete the folder "
                            f"{folder} (the next run generates the same set again)")


def _write_set(folder: Path, min_len: int, max_len: int, counts: Sequence[int], seed: int) -> None:
    total, done, start = sum(counts), 0, time.time()
    stream = generate(min_len, max_len, seed)
    for split_file, count in zip(SPLIT_FILES.values(), counts):
        with open(folder / split_file, "w", encoding="ascii", newline="\n") as f:
            f.write(HEADER + "\n")
            for _ in range(count):
                source, label = next(stream)
                f.write(f"{source}\t{label}\n")
                done += 1
                if total >= 20_000 and done % (total // 10) == 0:
                    _say(f"{done}/{total} ({time.time() - start:.0f}s)")
    manifest = {}
    for split_file, count in zip(SPLIT_FILES.values(), counts):
        rows, digest = _scan(folder / split_file, True)
        manifest[split_file] = {"rows": rows, "sha256": digest}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def _check_disk(root: Path, max_len: int, counts: Sequence[int]) -> None:
    """A set whose token cache alone (every example padded to ``max_len``, int16) exceeds the data
    folder's free disk is refused before anything is generated (a billion examples: issue 38 TR4)."""
    need = sum(counts) * max_len * np.dtype(np.int16).itemsize
    existing = next(p for p in (root, *root.parents) if p.exists())
    free = shutil.disk_usage(existing).free
    if need > free:
        raise DataError(
            f"this ListOps set cannot be stored: {sum(counts):,} examples (config.data.num_train/num_val/num_test = "
            f"{'/'.join(map(str, counts))}) padded to config.data.max_len={max_len} need at least "
            f"{need / 2**30:.1f} GiB of token cache, {existing} has {free / 2**30:.1f} GiB free. Nothing was "
            f"generated: ask for fewer or shorter examples")


def ensure_generated(root: Path, min_len: int, max_len: int, counts: Sequence[int], seed: int) -> Path:
    """Generate the set into its cache folder unless it is there; returns the folder.

    Files are written into a temporary folder that is renamed when complete, so an interrupted
    run never leaves a folder that looks complete; concurrent runs each write their own and the
    first rename wins.
    """
    if not 0 <= min_len < max_len - 1:
        raise InputError(
            f"config.data.min_len={min_len} and config.data.max_len={max_len}: need "
            f"0 <= min_len < max_len - 1 (lengths are kept when min_len < length < max_len)"
        )
    if min(counts) < 1:  # an empty validation or test split selects or reports on nothing
        raise InputError(f"config.data.num_train/num_val/num_test = {tuple(counts)}: need >= 1 each")
    final = generated_dir(root, min_len, max_len, counts, seed)
    if _complete(final):
        return final
    _check_disk(root, max_len, counts)
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(final)
    tmp = final.parent / f".{final.name}.tmp-{socket.gethostname()}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    sizes = "/".join(map(str, counts))
    _say(f"generating {sizes} examples ({min_len} < length < {max_len}, seed {seed}) into {final}")
    start = time.time()
    try:
        _write_set(tmp, min_len, max_len, counts, seed)
        if final.exists() and not _complete(final):  # a partial folder not made by us
            shutil.rmtree(final)
        try:
            os.replace(tmp, final)
        except OSError:
            if not _complete(final):  # else another process finished the same set first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _say(f"generated {sum(counts)} examples in {time.time() - start:.1f}s")
    return final


# ---------------------------------------------------------------------------------------------
# Reader
#
# A full training file is ~600 MB (~10^8 tokens): a Python loop per token would take minutes, so
# each chunk of lines is parsed with numpy. Parentheses are deleted (bytes.translate); then every
# word must be one byte (a digit or "]") or an operator, whose "[" is checked against the four
# operator spellings and whose letters are blanked out. On a problem, the offending line is
# re-parsed word by word (``tokenize``) to say exactly what is wrong.

_BYTE_ID = np.full(256, -1, np.int8)  # one-byte words -> token id (-1: not a token)
for _d in range(10):
    _BYTE_ID[ord(str(_d))] = VOCAB[str(_d)]
_BYTE_ID[ord(END)] = VOCAB[END]
_OP_BYTE = 0x80  # while parsing, operator k is the byte 0x80 + k (after checking the text is ASCII)
_BYTE_ID[_OP_BYTE : _OP_BYTE + len(OPERATORS)] = [VOCAB[op] for op in OPERATORS]
_OP_LETTERS = np.array([len(op) - 1 for op in OPERATORS])  # letters after "["


def _tail(op: str) -> tuple[int, int]:
    """(code, mask) of an operator's letters and the blank after them, as 4 little-endian bytes."""
    tail = op[1:].encode() + b" "
    return int.from_bytes(tail.ljust(4, b"\0"), "little"), (1 << (8 * len(tail))) - 1


_OP_TAILS = [_tail(op) for op in OPERATORS]
_OP_IDS = np.array([VOCAB[op] for op in OPERATORS], np.int8)
_DEPTH_STEP = np.zeros(len(VOCAB), np.int8)  # +1 per operator, -1 per closing bracket
_DEPTH_STEP[_OP_IDS] = 1
_DEPTH_STEP[VOCAB[END]] = -1
_CHUNK_BYTES = 16 << 20

Allocator = Callable[[str, tuple, type], np.ndarray]


def _zeros(field: str, shape: tuple, dtype: type) -> np.ndarray:
    return np.zeros(shape, dtype)


class _Where:
    """Names the file, line and split of a problem."""

    def __init__(self, path: Path, split: str):
        self.path, self.split = path, split

    def error(self, line: int, what: str) -> DataError:
        return DataError(f"{self.path}:{line} ({self.split} split): {what}")


def tokenize(source: str) -> list[int]:
    """Token ids of one Source string (parentheses dropped); a DataError names an unknown token."""
    words = source.replace("(", " ").replace(")", " ").split()
    for w in words:
        if w not in VOCAB or w == "<pad>":
            raise DataError(f"unknown token {w[:20]!r}")
    return [VOCAB[w] for w in words]


def _parse_chunk(raw: bytes, first_line: int, where: _Where) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token ids (flat, int8), token counts and labels of the whole lines ``raw`` (ends with newline)."""
    text = raw.translate(None, b"()")
    buf = np.frombuffer(text, np.uint8)
    newlines = np.flatnonzero(buf == ord("\n"))
    n = len(newlines)
    tabs = np.flatnonzero(buf == ord("\t"))
    tabs_per_line = np.bincount(np.searchsorted(newlines, tabs), minlength=n)
    bad = np.flatnonzero(tabs_per_line != 1)
    if len(bad):
        i = bad[0]
        line = raw.split(b"\n")[i]
        what = "empty line" if not line.strip() else (
            f"expected 2 tab-separated fields (Source, Target), found {tabs_per_line[i] + 1}"
        )
        raise where.error(first_line + i, what)

    labels = np.empty(n, np.int32)
    for i, (tab, end) in enumerate(zip(tabs.tolist(), newlines.tolist())):
        try:
            labels[i] = int(text[tab + 1 : end])
        except ValueError:
            target = raw.split(b"\n")[i].split(b"\t")[1].strip().decode(errors="replace")
            raise where.error(first_line + i, f"Target {target[:20]!r} is not an integer") from None
    bad = np.flatnonzero((labels < 0) | (labels >= NUM_CLASSES))
    if len(bad):
        raise where.error(first_line + bad[0], f"Target {labels[bad[0]]} is not in 0..{NUM_CLASSES - 1}")

    # The Source fields back to back, one blank apart (4 more at the end for the look-ahead below).
    starts = np.concatenate([[0], newlines[:-1] + 1])
    sources = [text[s:t] for s, t in zip(starts.tolist(), tabs.tolist())]
    flat = np.frombuffer(b" ".join(sources) + b"     ", np.uint8).copy()
    flat[flat == ord("\r")] = ord(" ")
    ends = np.cumsum(np.fromiter(map(len, sources), np.int64, n) + 1)  # end of each, blank included

    def fail(pos: int) -> DataError:
        i = int(np.searchsorted(ends, pos, side="right"))
        return where.error(first_line + i, _diagnose(raw.split(b"\n")[i]))

    if (flat >= 0x80).any():  # non-ASCII; also frees the bytes 0x80.. to stand for operators
        raise fail(int(np.argmax(flat >= 0x80)))
    brackets = np.flatnonzero(flat == ord("["))
    after = flat[brackets[:, None] + np.arange(1, 5)].astype(np.uint32)  # the 4 bytes after "["
    after = after[:, 0] | after[:, 1] << 8 | after[:, 2] << 16 | after[:, 3] << 24
    op = np.full(len(brackets), -1)
    for k, (code, mask) in enumerate(_OP_TAILS):
        op[(after & mask) == code] = k
    if (op < 0).any():
        raise fail(brackets[np.argmax(op < 0)])
    letters = _OP_LETTERS[op]
    for j in range(1, int(letters.max(initial=0)) + 1):  # blank the operator's letters
        flat[brackets[letters >= j] + j] = ord(" ")
    flat[brackets] = _OP_BYTE + op  # the operator as one byte
    is_word = flat != ord(" ")
    tokens = np.flatnonzero(is_word)
    ids = _BYTE_ID[flat[tokens]]
    glued = np.flatnonzero(is_word[tokens + 1])  # every word must be a single byte now
    unknown = np.flatnonzero(ids < 0)
    if len(glued) or len(unknown):
        raise fail(tokens[min(glued[:1].tolist() + unknown[:1].tolist())])
    lengths = np.diff(np.searchsorted(tokens, ends), prepend=0).astype(np.int32)
    _check_structure(ids, lengths, first_line, where)
    return ids, lengths, labels


def _diagnose(line: bytes) -> str:
    """What is wrong with the Source of ``line`` (the slow path, for the error message only)."""
    try:
        tokenize(line.split(b"\t")[0].decode())
    except (DataError, UnicodeDecodeError) as e:
        return str(e)
    return "malformed Source"


def _check_structure(ids: np.ndarray, lengths: np.ndarray, first_line: int, where: _Where) -> None:
    """Each line must hold one expression: brackets balance, nothing after the root, no empty operator."""
    empty = np.flatnonzero(lengths == 0)
    if len(empty):
        raise where.error(first_line + empty[0], "empty Source")
    depth = np.cumsum(_DEPTH_STEP[ids], dtype=np.int32)  # running over the whole chunk
    ends = np.cumsum(lengths) - 1
    starts = ends - lengths + 1
    before = np.concatenate([[0], depth[ends[:-1]]])  # depth before each line: 0 if all balance
    inner = depth.copy()
    inner[ends] = np.iinfo(np.int32).max  # only the last token may bring the depth back to 0
    bad = (depth[ends] != before) | (np.minimum.reduceat(inner, starts) - before < 1)
    bad |= (lengths == 1) & (_DEPTH_STEP[ids[ends]] != 0)
    if bad.any():
        what = "not one well-formed expression (unbalanced '[OP ... ]')"
        raise where.error(first_line + np.flatnonzero(bad)[0], what)
    empty_op = np.flatnonzero((_DEPTH_STEP[ids[:-1]] == 1) & (ids[1:] == VOCAB[END]))
    if len(empty_op):
        line = np.searchsorted(ends, empty_op[0])
        raise where.error(first_line + line, "an operator without arguments")


def read_split(path: Path, split: str, max_len: int, alloc: Allocator | None = None) -> Split:
    """Read one TSV (``Source<TAB>Target`` header, LRA's parenthesised trees) into a padded Split.

    A file with no example after its header is a DataError (a truncated download or copy would
    otherwise train, select or report on nothing; configs cannot ask for an empty split).
    ``alloc(field, shape, dtype)`` gives zero-filled arrays to fill (default: in memory); the cache
    passes memory-mapped files, so a 96k x 2000 split is written once, never held twice.
    """
    alloc = alloc or _zeros
    where = _Where(path, split)
    raw = path.read_bytes()
    if not raw.endswith(b"\n"):
        raw += b"\n"
    header_end = raw.find(b"\n")
    header = raw[:header_end].rstrip(b"\r").decode(errors="replace")
    if header != HEADER:
        raise where.error(1, f"expected the header {HEADER!r}, found {header[:40]!r}")
    num = raw.count(b"\n") - 1
    if num == 0 or not raw[header_end + 1:].strip():
        raise where.error(
            2, "no examples after the header (an empty split: a truncated download or copy?); "
            "to fix: re-extract it from the LRA release (lra_release.gz), or, for a generated "
            "set, delete its folder so that it is generated again")
    inputs = alloc("inputs", (num, max_len), np.int16)  # PAD_ID == 0
    labels = alloc("labels", (num,), np.int32)
    lengths = alloc("lengths", (num,), np.int32)
    row, pos = 0, header_end + 1
    while pos < len(raw):  # chunks of whole lines: bounded temporaries
        end = raw.find(b"\n", pos + _CHUNK_BYTES) + 1 or len(raw)
        ids, chunk_lengths, chunk_labels = _parse_chunk(raw[pos:end], 2 + row, where)
        too_long = np.flatnonzero(chunk_lengths > max_len)
        if len(too_long):
            i = too_long[0]
            raise where.error(
                2 + row + i,
                f"example has {chunk_lengths[i]} tokens, more than config.data.max_len={max_len}; "
                f"raise --config.data.max_len (and config.model.max_len) to at least {chunk_lengths[i]}",
            )
        rows = slice(row, row + len(chunk_lengths))
        inputs[rows][np.arange(max_len) < chunk_lengths[:, None]] = ids  # row-major: tokens in order
        lengths[rows], labels[rows] = chunk_lengths, chunk_labels
        row, pos = rows.stop, end
    return Split(name=split, inputs=inputs, labels=labels, lengths=lengths)


# ---------------------------------------------------------------------------------------------
# Task loader


def release_dir(root: Path) -> Path:
    return root / RELEASE_SUBDIR


def _source(config: ml_collections.ConfigDict) -> tuple[str, Path]:
    """("release" | "generated", folder of the three split files) for ``config.data``.

    auto: the release files if present and ``max_len`` holds their trees (< 2000 tokens), else a
    generated set with the config's limits and counts (which the release ignores). A release
    folder with some split files but not all is an error under auto too, never a fallback.
    """
    d = config.data
    root = data_dir(config.data_dir)
    max_len = int(d.max_len)
    if d.source not in ("auto", "release", "generated"):
        raise InputError(f"config.data.source={d.source!r}: valid values are auto, release, generated")
    fix = (
        f"download the LRA release (lra_release.gz) and extract it under the data dir {root} "
        f"(`python -m lra.data download listops --data_dir {root}` does both; or set "
        f"--config.data_dir or LRA_DATA_DIR), or use --config.data.source=generated"
    )
    use_release = d.source == "release" or (
        d.source == "auto" and _release_present(release_dir(root), fix)
        and max_len >= RELEASE_MAX_LEN - 1
    )
    if use_release:
        folder = release_dir(root)
        for f in SPLIT_FILES.values():
            require_file(folder / f, fix)
        return "release", folder
    counts = (int(d.num_train), int(d.num_val), int(d.num_test))
    return "generated", ensure_generated(root, int(d.min_len), max_len, counts, int(d.generator_seed))


def cache_entry(config: ml_collections.ConfigDict, source: tuple[str, Path] | None = None) -> Path:
    """The cache folder of the token arrays: keyed by the split files' (path, size, mtime) and
    ``max_len``, so an edited, replaced or regenerated file, or another max_len, builds a new one."""
    kind, folder = source or _source(config)
    files = [folder / f for f in SPLIT_FILES.values()]
    key = {"source": kind, "fingerprint": cache.file_fingerprint(files), "max_len": int(config.data.max_len),
           "reader": READER_VERSION}
    return cache.entry_path(config, "listops", key)


def _build(kind: str, folder: Path, max_len: int, counts: Sequence[int] = ()) -> Callable[[cache.Writer], dict]:
    """The cache builder: checks a generated set against ``counts`` (:func:`check_generated`), then
    tokenises the three files."""
    def build(writer: cache.Writer) -> dict:
        if kind == "generated":
            check_generated(folder, counts)
        sizes = {}
        for name, file in SPLIT_FILES.items():
            def alloc(field: str, shape: tuple, dtype: type, name: str = name) -> np.ndarray:
                return writer.array(f"{name}.{field}", shape, dtype)

            sizes[name] = len(read_split(folder / file, name, max_len, alloc))
        return {"splits": list(SPLIT_FILES), "sizes": sizes, "source": kind, "folder": str(folder),
                "max_len": max_len}

    return build


def load(config: ml_collections.ConfigDict) -> TaskData:
    """ListOps as ``config.data`` describes: ``source`` auto | release | generated (see ``_source``).

    The TSVs are parsed once into a cache entry (``lra.data.cache``) that later loads memory-map:
    the paper-scale set reloads in about a second instead of re-parsing 630 MB of text.
    """
    max_len = int(config.data.max_len)
    kind, folder = _source(config)
    _say(f"{kind} data from {folder}")
    counts = (int(config.data.num_train), int(config.data.num_val), int(config.data.num_test))
    splits = cache.build_or_load(cache_entry(config, (kind, folder)), _build(kind, folder, max_len, counts),
                                 f"ListOps ({kind}, max_len {max_len})", len(VOCAB), NUM_CLASSES)
    return TaskData(
        train=splits["train"],
        validation=splits["validation"],
        test=splits["test"],
        vocab_size=len(VOCAB),
        num_classes=NUM_CLASSES,
        max_len=max_len,
        dual=False,
    )
