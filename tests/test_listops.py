"""ListOps: seeded generator (LRA's algorithm), release-format reader, tokenizer and loader."""

from __future__ import annotations

import json
import os
import random
import re
import socket
from collections import Counter
from pathlib import Path

import ml_collections
import numpy as np
import pytest

from lra.data import DataError, TaskData, cache, get_loader, listops, listops_reader, listops_store, task_shapes
from lra.defaults import task_config

LIMITS = dict(min_len=10, max_len=60)
COUNTS = (300, 50, 50)


# --- an evaluator written independently of lra.data.listops ---------------------------------


def parse_pairs(source: str):
    """Parse LRA's ``to_string`` form, where every "(" opens a pair of exactly two items."""
    words = source.split()
    pos = 0

    def item():
        nonlocal pos
        word = words[pos]
        pos += 1
        if word != "(":
            return int(word) if word.isdigit() else word
        left, right = item(), item()
        assert words[pos] == ")", f"expected ')' at word {pos} of {source!r}"
        pos += 1
        return (left, right)

    tree = item()
    assert pos == len(words), f"trailing words in {source!r}"
    return tree


FUNCS = {
    "[MIN": min,
    "[MAX": max,
    "[MED": lambda args: int(np.median(args)),
    "[SM": lambda args: sum(args) % 10,
}


def evaluate(tree):
    """Value of a pair tree: an operator collects arguments pair by pair until "]"."""
    if not isinstance(tree, tuple):
        return tree
    left, right = evaluate(tree[0]), evaluate(tree[1])
    if isinstance(left, str):  # the operator meets its first argument
        return (left, [right])
    op, args = left
    if right == "]":
        return FUNCS[op](args)
    return (op, args + [right])


def words_of(source: str) -> list[str]:
    return [w for w in source.split() if w not in "()"]


def read_tsv(path: Path) -> list[tuple[str, int]]:
    lines = path.read_text().splitlines()
    assert lines[0] == "Source\tTarget"
    return [(src, int(tgt)) for src, tgt in (line.split("\t") for line in lines[1:])]


# --- helpers ----------------------------------------------------------------------------------


def generate_into(root: Path, seed: int = 0, counts=COUNTS, **limits) -> Path:
    limits = {**LIMITS, **limits}
    return listops.ensure_generated(root, limits["min_len"], limits["max_len"], counts, seed)


def make_config(root: Path, **data):
    config = task_config("listops")
    config.data_dir = str(root)
    config.data.update(
        source="generated",
        min_len=LIMITS["min_len"],
        max_len=LIMITS["max_len"],
        num_train=COUNTS[0],
        num_val=COUNTS[1],
        num_test=COUNTS[2],
        generator_seed=0,
    )
    config.data.update(data)
    return config


def write_release(root: Path, lines_by_split: dict[str, list[str]], newline: str = "\n") -> Path:
    folder = root / "lra_release" / "listops-1000"
    folder.mkdir(parents=True)
    for split, file in listops.SPLIT_FILES.items():
        lines = ["Source\tTarget", *lines_by_split[split]]
        (folder / file).write_bytes("".join(line + newline for line in lines).encode())
    return folder


RELEASE_LINES = {
    "train": ["( ( ( [MAX 2 ) 9 ) ] )\t9", "( ( ( ( [MED 1 ) 2 ) ( ( ( [SM 7 ) 8 ) ] ) ) ] )\t2"],
    "validation": ["( ( ( [MIN 4 ) 3 ) ] )\t3"],
    "test": ["( ( ( ( ( [MED 1 ) 2 ) 8 ) 9 ) ] )\t5"],
}


def test_release_fixture_is_valid_lra():
    for line in (line for lines in RELEASE_LINES.values() for line in lines):
        source, label = line.split("\t")
        assert evaluate(parse_pairs(source)) == int(label)


# --- generator --------------------------------------------------------------------------------


def test_generation_is_seeded(tmp_path):
    a, b = generate_into(tmp_path / "a"), generate_into(tmp_path / "b")
    c = generate_into(tmp_path / "c", seed=1)
    for file in listops.SPLIT_FILES.values():
        assert (a / file).read_bytes() == (b / file).read_bytes()
    assert (a / "basic_train.tsv").read_bytes() != (c / "basic_train.tsv").read_bytes()
    assert a.name != c.name and "len10-60" in a.name and "n300-50-50" in a.name


def test_labels_are_expression_values_and_lengths_within_limits(tmp_path):
    folder = generate_into(tmp_path)
    examples = [ex for f in listops.SPLIT_FILES.values() for ex in read_tsv(folder / f)]
    assert len(examples) == sum(COUNTS)
    for source, label in examples:
        assert evaluate(parse_pairs(source)) == label, source
        assert LIMITS["min_len"] < len(words_of(source)) < LIMITS["max_len"], source
    labels = Counter(label for _, label in examples)
    assert set(labels) <= set(range(10)) and len(labels) >= 8  # not a constant
    ops = Counter(w for source, _ in examples for w in words_of(source) if w.startswith("["))
    assert set(ops) == set(listops.OPERATORS)


def test_splits_are_disjoint_and_unique(tmp_path):
    # Tight limits make duplicate trees common, so uniqueness is really exercised.
    folder = generate_into(tmp_path, counts=(400, 100, 100), min_len=2, max_len=6)
    sources = {split: [s for s, _ in read_tsv(folder / f)] for split, f in listops.SPLIT_FILES.items()}
    everything = [s for split in sources.values() for s in split]
    assert len(everything) == 600 and len(set(everything)) == 600


def test_generator_distribution_follows_lra():
    """Operator probability 0.25 below max depth, randint(2, 10) arguments, uniform choices."""
    rand = random.Random(1).random
    roots, ops, arg_counts, digits, depths = Counter(), Counter(), Counter(), Counter(), []
    for _ in range(20_000):
        codes, value = listops.sample_tree(rand, max_len=10**9, max_depth=3)
        tree_words = words_of(listops.to_string(codes))
        roots[tree_words[0].startswith("[")] += 1
        max_depth, stack = 0, []  # stack: arguments seen so far by each open operator
        for w in tree_words:
            if w == "]":
                arg_counts[stack.pop()] += 1
                continue
            if stack:
                stack[-1] += 1
            if w.startswith("["):
                ops[w] += 1
                stack.append(0)
                max_depth = max(max_depth, len(stack))
            else:
                digits[w] += 1
        depths.append(max_depth)
        assert evaluate(parse_pairs(listops.to_string(codes))) == value
    assert abs(roots[True] / 20_000 - 0.25) < 0.015
    assert max(depths) == 2  # max_depth=3: the root's depth is 1, depth-3 nodes are digits
    total_ops = sum(ops.values())
    assert all(abs(n / total_ops - 0.25) < 0.02 for n in ops.values()) and len(ops) == 4
    assert sorted(arg_counts) == list(range(2, 11))
    assert all(abs(arg_counts[k] / total_ops - 1 / 9) < 0.015 for k in range(2, 11))
    total_digits = sum(digits.values())
    assert all(abs(digits[str(d)] / total_digits - 0.1) < 0.01 for d in range(10))


def test_to_string_matches_lra_layout():
    # Draws: 0.01 < 0.25 is an operator; 0.01 / 0.25 * 9 = 0.36 gives 2 + 0 arguments and
    # operator int(0.36 * 4) = 1 ([MAX); then digits int((u - 0.25) / 0.75 * 10) = 0 and 9.
    codes, value = listops.sample_tree(iter([0.01, 0.3, 0.95]).__next__, max_len=100)
    assert listops.to_string(codes) == "( ( ( [MAX 0 ) 9 ) ] )"
    assert value == 9


def test_interrupted_generation_leaves_no_complete_folder(tmp_path, monkeypatch):
    real = listops.generate

    def failing(*args, **kwargs):
        for i, example in enumerate(real(*args, **kwargs)):
            if i == 320:  # into the validation file
                raise KeyboardInterrupt
            yield example

    monkeypatch.setattr(listops_store, "generate", failing)
    with pytest.raises(KeyboardInterrupt):
        generate_into(tmp_path)
    parent = tmp_path / "listops_generated"
    assert list(parent.iterdir()) == []  # neither the final folder nor the temporary one
    monkeypatch.setattr(listops_store, "generate", real)
    folder = generate_into(tmp_path)
    assert len(read_tsv(folder / "basic_val.tsv")) == COUNTS[1]


def test_stale_temporaries_are_removed_and_a_concurrent_winner_is_kept(tmp_path, monkeypatch):
    final = listops.generated_dir(tmp_path, 10, 60, COUNTS, 0)
    final.parent.mkdir(parents=True)
    host = socket.gethostname()
    dead = final.parent / f".{final.name}.tmp-{host}-99999999"  # beyond any pid_max: not running
    alive = final.parent / f".{final.name}.tmp-{host}-{os.getppid()}"
    dead.mkdir()
    alive.mkdir()
    real_write = listops_store._write_set

    def write_while_another_process_finishes(folder, *args):
        real_write(folder, *args)
        other = final.parent / "other"
        other.mkdir()
        real_write(other, *args)
        other.rename(final)  # the other process renames first

    monkeypatch.setattr(listops_store, "_write_set", write_while_another_process_finishes)
    assert generate_into(tmp_path) == final
    assert sorted(p.name for p in final.parent.iterdir()) == sorted([final.name, alive.name])
    assert len(read_tsv(final / "basic_test.tsv")) == COUNTS[2]


def test_cached_set_is_reused(tmp_path, monkeypatch):
    first = listops.load(make_config(tmp_path))

    def no_generation(*args, **kwargs):
        raise AssertionError("regenerated a cached set")

    monkeypatch.setattr(listops_store, "generate", no_generation)
    second = listops.load(make_config(tmp_path))
    np.testing.assert_array_equal(first.train.inputs, second.train.inputs)


# --- reader and tokenizer -------------------------------------------------------------------------


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_reader_parses_release_format(tmp_path, newline):
    write_release(tmp_path, RELEASE_LINES, newline)
    data = listops.load(make_config(tmp_path, source="release", max_len=12))
    v = listops.VOCAB
    train = data.train
    assert train.lengths.tolist() == [4, 8]
    assert train.inputs[0, :4].tolist() == [v["[MAX"], v["2"], v["9"], v["]"]]
    assert train.inputs[1].tolist() == [v[w] for w in "[MED 1 2 [SM 7 8 ] ]".split()] + [0] * 4
    source = RELEASE_LINES["train"][1].split("\t")[0]
    assert train.inputs[1, : train.lengths[1]].tolist() == listops.tokenize(source)
    assert train.labels.tolist() == [9, 2]
    assert data.validation.labels.tolist() == [3] and data.test.labels.tolist() == [5]
    assert data.test.inputs[0, :6].tolist() == [v["[MED"], v["1"], v["2"], v["8"], v["9"], v["]"]]


def test_vocabulary_is_fixed():
    v = listops.VOCAB
    assert v["<pad>"] == 0 and [v[str(d)] for d in range(10)] == list(range(1, 11))
    assert [v[op] for op in ("[MIN", "[MAX", "[MED", "[SM")] == [11, 12, 13, 14] and v["]"] == 15
    assert listops.tokenize("( ( ( [SM 3 ) 4 ) ] )") == [14, 4, 5, 15]
    with pytest.raises(DataError, match="unknown token '\\[FIRST'"):
        listops.tokenize("( ( [FIRST 3 ) ] )")


MALFORMED = [
    ("( ( ( [MAX 2 ) X ) ] )\t9", "unknown token 'X'"),
    ("( ( ( [MAX 12 ) 9 ) ] )\t9", "unknown token '12'"),
    ("( ( ( [MAXX 2 ) 9 ) ] )\t9", "unknown token '\\[MAXX'"),
    ("( ( ( [MAX 2 ) 9 ) ] )", "2 tab-separated fields"),
    ("( ( ( [MAX 2 ) 9 ) ] )\t9\t1", "found 3"),
    ("( ( ( [MAX 2 ) 9 ) ] )\tnine", "Target 'nine' is not an integer"),
    ("( ( ( [MAX 2 ) 9 ) ] )\t12", "not in 0..9"),
    ("( ( [MAX 2 ) 9 )\t9", "well-formed"),
    ("( ( ( [MAX 2 ) 9 ) ] ) ]\t9", "well-formed"),
    ("3 ( ( ( [MAX 2 ) 9 ) ] )\t9", "well-formed"),
    ("( [MAX ] )\t9", "without arguments"),
    ("\t9", "empty Source"),
    ("", "empty line"),
    ("( ( ( [MAX 2 ) 9 ) ] ) é\t9", "unknown token"),
]


@pytest.mark.parametrize("line, what", MALFORMED)
def test_malformed_line_names_file_and_line(tmp_path, line, what):
    lines = dict(RELEASE_LINES, train=[*RELEASE_LINES["train"], line, RELEASE_LINES["train"][0]])
    folder = write_release(tmp_path, lines)
    with pytest.raises(DataError, match=what) as err:
        listops.load(make_config(tmp_path, source="release", max_len=12))
    assert f"{folder / 'basic_train.tsv'}:4 " in str(err.value)  # header, 2 good lines, then this


def test_bad_header_is_an_error(tmp_path):
    folder = write_release(tmp_path, RELEASE_LINES)
    path = folder / "basic_val.tsv"
    path.write_text("( ( ( [MIN 4 ) 3 ) ] )\t3\n")
    with pytest.raises(DataError, match="header") as err:
        listops.read_split(path, "validation", 12)
    assert f"{path}:1 " in str(err.value)


def test_reader_handles_many_chunks(tmp_path, monkeypatch):
    folder = generate_into(tmp_path)
    expected = read_tsv(folder / "basic_train.tsv")
    monkeypatch.setattr(listops_reader, "_CHUNK_BYTES", 500)  # a few lines per chunk
    split = listops.read_split(folder / "basic_train.tsv", "train", LIMITS["max_len"])
    assert split.labels.tolist() == [label for _, label in expected]
    for row, (source, _) in zip(split.inputs, expected, strict=False):
        ids = [listops.VOCAB[w] for w in words_of(source)]
        assert row.tolist() == ids + [0] * (LIMITS["max_len"] - len(ids))
    # the line number of an error counts across chunks
    lines = (folder / "basic_train.tsv").read_text().splitlines()
    lines[250] = lines[250].replace("]", "x", 1)
    (folder / "basic_train.tsv").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=":251 .*unknown token 'x'"):
        listops.read_split(folder / "basic_train.tsv", "train", LIMITS["max_len"])


# --- loader -------------------------------------------------------------------------------------


def test_missing_release_file_names_path_and_fix(tmp_path):
    with pytest.raises(DataError) as err:
        listops.load(make_config(tmp_path, source="release"))
    message = str(err.value)
    assert str(tmp_path / "lra_release" / "listops-1000" / "basic_train.tsv") in message
    assert "source=generated" in message
    write_release(tmp_path, RELEASE_LINES)
    (tmp_path / "lra_release" / "listops-1000" / "basic_test.tsv").unlink()
    with pytest.raises(DataError, match="basic_test.tsv"):
        listops.load(make_config(tmp_path, source="release"))


@pytest.mark.parametrize("missing", list(listops.SPLIT_FILES.values()))
def test_auto_with_a_partial_release_names_the_missing_file(tmp_path, monkeypatch, missing):
    folder = write_release(tmp_path, RELEASE_LINES)
    (folder / missing).unlink()

    def no_generation(*args, **kwargs):
        raise AssertionError("fell back to a generated set")

    monkeypatch.setattr(listops_store, "generate", no_generation)
    for max_len in (60, 2000):  # whether or not the release's trees would fit
        with pytest.raises(DataError, match="partial ListOps release") as err:
            listops.load(make_config(tmp_path, source="auto", max_len=max_len))
        message = str(err.value)
        assert str(folder / missing) in message and "to fix" in message and "lra_release.gz" in message
        assert all(str(folder / f) not in message for f in listops.SPLIT_FILES.values() if f != missing)


def test_header_only_split_names_the_file(tmp_path):
    from lra.data import prepare

    folder = write_release(tmp_path, dict(RELEASE_LINES, validation=[]))
    path = folder / "basic_val.tsv"
    assert path.read_text() == "Source\tTarget\n"
    with pytest.raises(DataError, match="no examples after the header") as err:
        listops.read_split(path, "validation", 12)
    assert f"{path}:2 " in str(err.value) and "to fix" in str(err.value)
    path.write_text("Source\tTarget")  # no final newline: still header-only
    config = prepare.make_config("listops", str(tmp_path), 2000, ["source=release"])
    with pytest.raises(DataError, match="no examples after the header") as err:
        prepare.prepare(config, download=False)
    assert f"{path}:2 " in str(err.value)


def test_load_returns_padded_task_data(tmp_path):
    config = make_config(tmp_path)
    data = get_loader("listops")(config)
    assert isinstance(data, TaskData)
    assert (data.vocab_size, data.num_classes, data.max_len, data.dual) == (16, 10, 60, False)
    assert task_shapes("listops") == (data.vocab_size, data.num_classes, data.dual)  # preflight, step bench
    folder = listops.generated_dir(tmp_path, 10, 60, COUNTS, 0)
    for (name, split), file, count in zip(data.splits().items(), listops.SPLIT_FILES.values(), COUNTS, strict=False):
        examples = read_tsv(folder / file)
        assert split.name == name and len(split) == count
        assert split.inputs.shape == (count, 60) and np.issubdtype(split.inputs.dtype, np.integer)
        assert split.lengths.tolist() == [len(words_of(s)) for s, _ in examples]
        assert split.labels.tolist() == [label for _, label in examples]
        positions = np.arange(60)[None, :]
        assert (split.inputs[positions >= split.lengths[:, None]] == 0).all()
        assert (split.inputs[positions < split.lengths[:, None]] > 0).all()
        assert split.inputs.max() < data.vocab_size


def test_example_longer_than_max_len_is_an_error(tmp_path):
    folder = write_release(tmp_path, RELEASE_LINES)
    with pytest.raises(DataError, match="basic_train.tsv:3 .*8 tokens.*config.data.max_len=7"):
        listops.load(make_config(tmp_path, source="release", max_len=7))
    assert folder.exists()


def test_auto_uses_release_only_when_present_and_it_fits(tmp_path):
    auto = dict(source="auto")
    generated = listops.load(make_config(tmp_path, **auto))  # no release: generated
    assert len(generated.train) == COUNTS[0]
    write_release(tmp_path, RELEASE_LINES)
    short = listops.load(make_config(tmp_path, **auto))  # release present, but max_len 60 < 1999
    assert len(short.train) == COUNTS[0]
    release = listops.load(make_config(tmp_path, max_len=2000, **auto))
    assert len(release.train) == 2 and release.max_len == 2000 and release.train.inputs.shape == (2, 2000)


@pytest.mark.parametrize(
    "data, field",
    [
        (dict(source="both"), "config.data.source"),
        (dict(min_len=59), "config.data.min_len"),
        (dict(num_train=0), "num_train"),
    ],
)
def test_invalid_config_names_the_field(tmp_path, data, field):
    with pytest.raises(ValueError, match=field):
        listops.load(make_config(tmp_path, **data))


# --- token cache ----------------------------------------------------------------------------------


def _forbid_reading(monkeypatch):
    def no_parse(*args, **kwargs):
        raise AssertionError("re-parsed a TSV that the cache holds")

    monkeypatch.setattr(listops, "read_split", no_parse)


@pytest.mark.parametrize("source", ["generated", "release"])
def test_second_load_comes_from_the_cache(tmp_path, monkeypatch, source):
    if source == "release":
        write_release(tmp_path, RELEASE_LINES)
    config = make_config(tmp_path, source=source, max_len=60)
    first = listops.load(config)
    entry = listops.cache_entry(config)
    assert (entry / "meta.json").is_file() and entry.parent == tmp_path / "cache"
    _forbid_reading(monkeypatch)
    second = listops.load(config)
    assert isinstance(second.train.inputs, np.memmap)  # memory-mapped, not parsed
    for name, split in first.splits().items():
        again = second.splits()[name]
        for field in ("inputs", "labels", "lengths"):
            np.testing.assert_array_equal(getattr(split, field), getattr(again, field))
            assert getattr(split, field).dtype == getattr(again, field).dtype


def test_changed_file_or_max_len_rebuilds_the_entry(tmp_path, monkeypatch):
    folder = write_release(tmp_path, RELEASE_LINES)
    config = make_config(tmp_path, source="release", max_len=12)
    first = listops.load(config)
    old_entry = listops.cache_entry(config)
    with open(folder / "basic_val.tsv", "a") as f:  # one more example: size and mtime change
        f.write("( ( ( [SM 4 ) 3 ) ] )\t7\n")
    calls = []
    real_read = listops.read_split
    monkeypatch.setattr(listops, "read_split", lambda *a, **k: calls.append(a[1]) or real_read(*a, **k))
    second = listops.load(config)
    assert listops.cache_entry(config) != old_entry and calls == ["train", "validation", "test"]
    assert first.validation.labels.tolist() == [3] and second.validation.labels.tolist() == [3, 7]
    third = listops.load(make_config(tmp_path, source="release", max_len=16))  # another max_len
    assert third.train.inputs.shape == (2, 16) and len(calls) == 6
    np.testing.assert_array_equal(third.train.inputs[:, :12], second.train.inputs)


def test_failed_parse_leaves_no_cache_entry(tmp_path):
    folder = write_release(tmp_path, dict(RELEASE_LINES, test=[]))  # header-only test split
    config = make_config(tmp_path, source="release", max_len=12)
    with pytest.raises(DataError, match="basic_test.tsv:2 .*no examples after the header"):
        listops.load(config)
    assert not list((tmp_path / "cache").iterdir())  # no entry, no temporary folder
    (folder / "basic_test.tsv").write_text("Source\tTarget\n( ( ( [MIN 4 ) 3 ) ] )\t3\n")
    assert listops.load(config).test.labels.tolist() == [3]


# --- sealed cache and generated sets (issue 26 D6, D7, U8, U9) -----------------------------------


def _loaded_entry(tmp_path: Path) -> tuple[ml_collections.ConfigDict, Path]:
    config = make_config(tmp_path, max_len=60)
    listops.load(config)
    return config, listops.cache_entry(config)


def _refused(config, *patterns: str) -> None:
    with pytest.raises(DataError) as caught:
        listops.load(config)
    for pattern in patterns:
        assert re.search(pattern, str(caught.value)), (pattern, str(caught.value))


def test_cache_edited_in_place_is_refused(tmp_path):
    config, entry = _loaded_entry(tmp_path)
    inputs = np.load(entry / "train.inputs.npy", mmap_mode="r+")
    inputs[0, [0, 1]] = inputs[0, [1, 0]]  # two tokens swapped: still in range, another example
    inputs.flush()
    del inputs
    _refused(
        config,
        re.escape(str(entry / "train.inputs.npy")) + " differs from what was written",
        "to fix: delete the cache folder " + re.escape(str(entry)),
    )


def test_out_of_range_cached_token_is_refused_at_load(tmp_path):
    """A token id past the vocabulary (here sealed with a fresh digest, as a buggy writer would)."""
    config, entry = _loaded_entry(tmp_path)
    path = entry / "validation.inputs.npy"
    inputs = np.load(path, mmap_mode="r+")
    inputs[3, 0] = len(listops.VOCAB) + 5
    inputs.flush()
    del inputs
    meta = json.loads((entry / "meta.json").read_text())
    meta["sha256"][path.name] = cache.file_digest(path)
    (entry / "meta.json").write_text(json.dumps(meta))
    _refused(
        config,
        re.escape(str(path)) + rf": token id {len(listops.VOCAB) + 5} in row 3 is outside \[0, "
        rf"{len(listops.VOCAB)}\)",
        "delete the cache folder",
    )


@pytest.mark.parametrize("damage", ["half_array", "empty_meta"])
def test_damaged_cache_names_the_path_and_the_fix(tmp_path, damage):
    config, entry = _loaded_entry(tmp_path)
    path = entry / ("train.inputs.npy" if damage == "half_array" else "meta.json")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2] if damage == "half_array" else b"")
    _refused(config, re.escape(str(path)), "to fix: delete the cache folder " + re.escape(str(entry)))


def test_generated_file_cut_short_is_refused(tmp_path):
    """D7: the set promises COUNTS rows (its name and manifest); a cut file is not tokenised."""
    config = make_config(tmp_path)
    folder = generate_into(tmp_path)
    train = folder / "basic_train.tsv"
    lines = train.read_text().splitlines(keepends=True)
    train.write_text("".join(lines[: 1 + COUNTS[0] // 2]))
    _refused(
        config,
        re.escape(str(train)) + f" holds {COUNTS[0] // 2} examples, but the generated set promises " f"{COUNTS[0]}",
        "delete the folder " + re.escape(str(folder)),
    )
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").iterdir())
    train.write_text("".join(lines[:-1]) + lines[-1].replace("\t", "\t1"))  # same rows, edited
    _refused(config, "differs from what was generated")
