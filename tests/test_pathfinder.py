"""Pathfinder / Path-X: the generator (deterministic, balanced, the label readable from the pixels),
the reader on a hand-made fixture in the LRA release layout, its errors, and one smoke run.

Every config's smoke run (both tasks, every family) is in tests/test_all_configs.py's slow set.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lra.data import download, pathfinder, pathfinder_gen, pathfinder_write, prepare, task_shapes
from lra.data.types import DataError
from lra.defaults import task_config

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def make_config(root: Path, task: str = "pathfinder", **data):
    config = task_config(task)
    config.data_dir = str(root)
    for key, value in data.items():
        config.data[key] = value
    return config


# ----------------------------------------------------------------------------------------- generator


def flood_fill(marked: np.ndarray, start: tuple[int, int], radius: int) -> np.ndarray:
    """Pixels reachable from ``start`` through marked pixels in steps of at most ``radius``
    (Chebyshev), i.e. a flood fill with a (2 radius + 1)^2 neighbourhood."""
    reached = np.zeros_like(marked)
    reached[start] = True
    while True:
        grown = np.zeros_like(reached)
        h, w = reached.shape
        padded = np.pad(reached, radius)
        for dy in range(2 * radius + 1):
            for dx in range(2 * radius + 1):
                grown |= padded[dy : dy + h, dx : dx + w]
        grown &= marked
        if (grown == reached).all():
            return reached
        reached = grown


@pytest.fixture(scope="module")
def batches() -> dict[tuple[int, int], pathfinder_gen.Batch]:
    """A few images of every 32 x 32 difficulty, the 16 x 16 cpu profile and Path-X's 128 x 128."""
    sizes = {(32, 6): 40, (32, 9): 40, (32, 14): 40, (16, 6): 40, (16, 9): 20, (128, 14): 4}
    return {key: pathfinder_gen.generate(key[0], key[1], n, [7, *key]) for key, n in sizes.items()}


def test_generator_is_deterministic_per_seed():
    a = pathfinder_gen.generate(32, 9, 12, [1, 2])
    b = pathfinder_gen.generate(32, 9, 12, [1, 2])
    c = pathfinder_gen.generate(32, 9, 12, [1, 3])
    assert np.array_equal(a.images, b.images) and np.array_equal(a.labels, b.labels)
    assert np.array_equal(a.markers, b.markers)
    assert not np.array_equal(a.images, c.images)


@pytest.mark.parametrize("n", [2, 7, 40])
def test_labels_are_balanced(n):
    labels = pathfinder_gen.generate(16, 6, n, [n]).labels
    assert sorted(set(labels.tolist())) == [0, 1] and labels.sum() == n // 2


def test_label_is_whether_a_chain_of_marked_pixels_joins_the_markers(batches):
    for (side, length), batch in batches.items():
        link = pathfinder_gen.GEOMETRIES[side].link
        assert batch.images.shape == (len(batch.labels), side, side) and batch.images.dtype == np.uint8
        for image, label, markers in zip(batch.images, batch.labels, batch.markers, strict=False):
            marked = image > 0
            a, b = (tuple(int(v) for v in m) for m in markers)
            assert marked[a] and marked[b], "each marker centre is a marked pixel"
            joined = flood_fill(marked, a, link)[b]
            assert joined == bool(label), f"{side} x {side}, contour {length}: label {label}, joined {joined}"
            # with a smaller step the dashes of a path are not always joined: the gaps are real
        assert 0.02 < np.mean(batch.images > 0) < 0.5


def test_paths_are_dashed_and_distractors_drawn(batches):
    """The chains need steps of up to `link` pixels: with 8-connectivity alone some connected
    examples fall apart (visible gaps between paddles); distractor paths are there."""
    batch = batches[(32, 6)]
    split = sum(
        not flood_fill(img > 0, tuple(int(v) for v in m[0]), 1)[tuple(int(v) for v in m[1])]
        for img, lab, m in zip(batch.images, batch.labels, batch.markers, strict=False)
        if lab == 1
    )
    assert split > 0
    assert batch.distractors.mean() > 0.5 * pathfinder_gen.GEOMETRIES[32].num_distractors(6)


def test_a_contour_that_does_not_fit_is_an_error():
    with pytest.raises(pathfinder_gen.GenerationError, match="no room for two target paths of 14 paddles"):
        pathfinder_gen.generate(16, 14, 4, [0], max_attempts=300)


def test_write_setting_makes_the_release_layout(tmp_path):
    folder = tmp_path / "pathfinder16" / "curv_baseline"
    folder.parent.mkdir()
    pathfinder_write.write_setting(folder, 16, "curv_baseline", 25, seed=3, workers=1, per_file=10)
    assert sorted(p.name for p in (folder / "metadata").iterdir()) == ["0.npy", "1.npy", "2.npy"]
    lines = (folder / "metadata" / "2.npy").read_text().splitlines()
    assert len(lines) == 5
    fields = lines[0].split(" ")
    assert fields[:4] == ["imgs/2", "sample_0.png", "0", fields[3]] and fields[3] in ("0", "1") and len(fields) == 11
    with Image.open(folder / "imgs" / "2" / "sample_4.png") as im:
        assert im.mode == "L" and im.size == (16, 16)
    # the files hold what generate() makes for that batch's seed
    batch = pathfinder_gen.generate(16, 6, 5, pathfinder_gen.batch_seed(3, 16, "curv_baseline", 2))
    assert [int(line.split()[3]) for line in lines] == batch.labels.tolist()
    with Image.open(folder / "imgs" / "2" / "sample_1.png") as im:
        assert np.array_equal(np.asarray(im), batch.images[1])
    assert not [p for p in tmp_path.rglob(".*tmp*")]  # written through a temporary folder, renamed


# ----------------------------------------------------------------------------------------- reader


def write_release(root: Path, side: int = 32, setting: str = "curv_contour_length_14") -> Path:
    """A small setting in the release layout, written by hand: batches 0, 1 and 10 (numeric order,
    not text order), 10 + 5 + 5 images; image k of the whole setting is filled with value k and
    its label is k % 2; batch 1's metadata is a real numpy array (np.save), the others text; one
    image of batch 0 is an empty file (left out, as LRA does)."""
    folder = root / "lra_release" / f"pathfinder{side}" / setting
    (folder / "metadata").mkdir(parents=True)
    k = 0
    for batch, count in ((0, 10), (1, 5), (10, 5)):
        (folder / "imgs" / str(batch)).mkdir(parents=True)
        rows = []
        for i in range(count):
            path = folder / "imgs" / str(batch) / f"sample_{i}.png"
            if (batch, i) == (0, 3):
                path.write_bytes(b"")
            else:
                Image.fromarray(np.full((side, side), k, np.uint8)).save(path)
            rows.append(
                [f"imgs/{batch}", f"sample_{i}.png", str(i), str(k % 2), "1.0", "14", "4", "2", "0.5", "1", "1"]
            )
            k += 1
        if batch == 1:
            np.save(folder / "metadata" / "1.npy", np.array(rows))
        else:
            (folder / "metadata" / f"{batch}.npy").write_text("".join(" ".join(r) + "\n" for r in rows))
    return folder


def test_reader_parses_the_release_layout(tmp_path, monkeypatch):
    write_release(tmp_path)
    config = make_config(tmp_path, source="release")
    assert pathfinder.locate(config)["kind"] == "release"
    data = pathfinder.load(config)
    # 20 rows: 16 / 2 / 2 by LRA's 80/10/10; the empty image (row 3) leaves train with 15
    assert (len(data.train), len(data.validation), len(data.test)) == (15, 2, 2)
    assert data.vocab_size == 257 and data.num_classes == 2 and data.max_len == 1024 and not data.dual
    assert task_shapes("pathfinder") == task_shapes("pathx") == (data.vocab_size, data.num_classes, data.dual)
    values = [int(row[0]) - 1 for row in np.asarray(data.train.inputs)]
    assert values == [k for k in range(16) if k != 3]  # batch 0, then 1, then 10
    assert [int(row[0]) - 1 for row in np.asarray(data.test.inputs)] == [18, 19]
    for split in data.splits().values():
        inputs = np.asarray(split.inputs)
        assert (inputs == inputs[:, :1]).all() and (np.asarray(split.lengths) == 1024).all()
        assert np.array_equal(np.asarray(split.labels), (inputs[:, 0] - 1) % 2)
    # the second load reads the cache, not the images
    monkeypatch.setattr(pathfinder, "read_png", lambda *a: pytest.fail("images read again"))
    again = pathfinder.load(config)
    assert np.array_equal(np.asarray(again.train.inputs), np.asarray(data.train.inputs))


def test_reader_pads_to_max_len_and_refuses_a_short_one(tmp_path):
    write_release(tmp_path, side=16)
    config = make_config(tmp_path, pathfinder_resolution=16, max_len=300)
    data = pathfinder.load(config)
    assert data.train.inputs.shape == (15, 300) and (np.asarray(data.train.inputs)[:, 256:] == 0).all()
    with pytest.raises(ValueError, match="max_len=200 is shorter than the 256 pixels"):
        pathfinder.load(make_config(tmp_path, pathfinder_resolution=16, max_len=200))


def test_auto_generates_when_the_release_is_absent(tmp_path):
    config = make_config(
        tmp_path, pathfinder_resolution=16, pathfinder_setting="curv_baseline", pathfinder_images=30, max_len=256
    )
    source = pathfinder.locate(config)
    assert source["kind"] == "generated" and not source["folder"].exists()
    data = pathfinder.load(config)
    assert (len(data.train), len(data.validation), len(data.test)) == (24, 3, 3)
    assert (source["folder"] / "metadata" / "0.npy").is_file()
    labels = np.concatenate([np.asarray(s.labels) for s in data.splits().values()])
    assert labels.sum() == 15
    write_release(tmp_path, side=16, setting="curv_baseline")  # now the release is there: auto takes it
    assert pathfinder.locate(config)["kind"] == "release"
    assert (
        pathfinder.locate(
            make_config(tmp_path, pathfinder_resolution=16, pathfinder_setting="curv_baseline", source="generated")
        )["kind"]
        == "generated"
    )


def test_prepare_command_generates_and_summarises(tmp_path, capsys):
    rc = prepare.main(
        [
            "prepare",
            "pathx",
            "--data_dir",
            str(tmp_path),
            "--max_len",
            "256",
            "--set",
            "pathfinder_resolution=16",
            "--set",
            "pathfinder_setting=curv_baseline",
            "--set",
            "pathfinder_images=20",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "task pathx: vocab 257, 2 classes, max_len 256" in out and "train" in out


def test_download_table_knows_the_pathfinder_folders():
    for task, side in (("pathfinder", 32), ("pathx", 128)):
        name, finals = download.TASK_ARCHIVE[task]
        assert finals == (f"lra_release/pathfinder{side}",)
        assert download.ARCHIVES[name].url == download.ARCHIVES["lra_release"].url


# ----------------------------------------------------------------------------------------- errors


def _error(config) -> str:
    with pytest.raises(DataError) as info:
        pathfinder.load(config)
    return str(info.value)


def test_missing_release_names_the_folder(tmp_path):
    message = _error(make_config(tmp_path, source="release"))
    assert str(tmp_path / "lra_release" / "pathfinder32" / "curv_contour_length_14") in message
    assert "python -m lra.data download pathfinder" in message


def test_missing_metadata_folder_names_it(tmp_path):
    (tmp_path / "lra_release" / "pathfinder32" / "curv_contour_length_14" / "imgs").mkdir(parents=True)
    assert str(tmp_path / "lra_release" / "pathfinder32" / "curv_contour_length_14" / "metadata") in _error(
        make_config(tmp_path)
    )


@pytest.mark.parametrize(
    "line, expected",
    [
        ("imgs/0 sample_0.png 0", "3 field(s), expected at least 4"),
        ("imgs/0 sample_0.png 0 2 1.0", "label '2', expected 0 or 1"),
        ("../.. secret.png 0 1", "leaves the setting's folder"),
    ],
)
def test_malformed_metadata_names_the_file_and_line(tmp_path, line, expected):
    folder = write_release(tmp_path)
    meta = folder / "metadata" / "10.npy"
    meta.write_text(meta.read_text() + line + "\n")
    message = _error(make_config(tmp_path))
    assert f"{meta}, line 6" in message and expected in message


def test_missing_image_names_it(tmp_path):
    folder = write_release(tmp_path)
    (folder / "imgs" / "10" / "sample_2.png").unlink()
    assert f"Pathfinder image not found: {folder / 'imgs' / '10' / 'sample_2.png'}" in _error(make_config(tmp_path))


def test_wrong_size_or_corrupt_image_names_it(tmp_path):
    folder = write_release(tmp_path)
    bad = folder / "imgs" / "1" / "sample_0.png"
    Image.fromarray(np.zeros((31, 32), np.uint8)).save(bad)
    assert f"Pathfinder image {bad} is 32 x 31, expected 32 x 32" in _error(make_config(tmp_path))
    bad.write_bytes(b"not a png")
    assert f"cannot decode the Pathfinder image {bad}" in _error(make_config(tmp_path))


def test_unknown_setting_is_refused(tmp_path):
    with pytest.raises(ValueError, match="pathfinder_setting='hard'"):
        pathfinder.load(make_config(tmp_path, pathfinder_setting="hard"))


# ----------------------------------------------------------------------------------------- a run


def test_smoke_run_end_to_end(tmp_path):
    from lra.train import train_and_evaluate

    spec = importlib.util.spec_from_file_location("cfg", CONFIGS / "pathfinder_transformer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config("smoke")
    config.data_dir = str(tmp_path / "data")
    config.num_train_steps = 2
    config.eval_every = config.checkpoint_every = 2
    result = train_and_evaluate(config, tmp_path / "run")
    assert result["task"] == "pathfinder" and 0.0 <= result["test_accuracy"] <= 1.0


@pytest.mark.parametrize("task", ["pathfinder", "pathx"])
def test_pixel_values_can_be_embedded_linearly(task):
    from lra.defaults import make_config as build
    from lra.training.checks import validate_config

    config = build(task, "softmax", "smoke")
    config.model.embedding = "linear"
    validate_config(config)  # pixel tasks accept normalised pixel values, as the image task does
    config.task = "listops"
    with pytest.raises(ValueError, match="embeds pixel values"):
        validate_config(config)
