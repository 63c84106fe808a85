"""The ListOps reader: TSV to padded token arrays, parsed with numpy (~8 s for 600 MB); errors name file and line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from lra.data.listops_format import END, HEADER, NUM_CLASSES, OPERATORS, VOCAB
from lra.data.types import DataError, Split

# ~10^8 tokens: a Python loop per token would take minutes. Parentheses are deleted; then every word must be one
# byte (a digit or "]") or an operator, whose "[" is checked against the four spellings and whose letters are
# blanked. On a problem, the line is re-parsed word by word (``tokenize``) to say exactly what is wrong.

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
        what = (
            "empty line"
            if not line.strip()
            else (f"expected 2 tab-separated fields (Source, Target), found {tabs_per_line[i] + 1}")
        )
        raise where.error(first_line + i, what)

    labels = np.empty(n, np.int32)
    for i, (tab, end) in enumerate(zip(tabs.tolist(), newlines.tolist(), strict=False)):
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
    sources = [text[s:t] for s, t in zip(starts.tolist(), tabs.tolist(), strict=False)]
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
    """One TSV (``Source<TAB>Target`` header) into a padded Split (no example: a DataError);
    ``alloc(field, shape, dtype)`` gives zero-filled arrays (the cache's are memory-mapped files)."""
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
    if num == 0 or not raw[header_end + 1 :].strip():
        raise where.error(
            2,
            "no examples after the header (an empty split: a truncated download or copy?); "
            "to fix: re-extract it from the LRA release (lra_release.gz), or, for a generated "
            "set, delete its folder so that it is generated again",
        )
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
