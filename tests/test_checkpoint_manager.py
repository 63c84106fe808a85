"""Checkpoints through orbax's CheckpointManager: keep-N and best_fn, the config as orbax step
metadata, one rename per save (orbax's, sealed just before it), and checkpoints written before the
CheckpointManager (integrity format 1) still verified, restored and resumed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from lra.training import provenance
from lra.training.checkpoints import DELETED, RECORD, STEP_METADATA, Checkpoints, CorruptCheckpointError
from lra.training.run_files import config_digest
from test_checkpoints import _state, flip_bit

CONFIG = {"learning_rate": 0.005, "seed": 0}


def save_format1(folder: Path, state, config: dict | None) -> None:
    """A checkpoint as the code before the CheckpointManager wrote it: a bare orbax Checkpointer
    into ``<step>/state/``, and ``integrity.json`` with the digests of the files under ``state/``."""
    with ocp.Checkpointer(ocp.StandardCheckpointHandler()) as checkpointer:
        checkpointer.save(folder / "state", args=ocp.args.StandardSave(state))
    record = {
        "format": 1,
        "kind": folder.parent.name,
        "step": int(folder.name),
        "files": provenance.file_digests(folder / "state"),
        "arrays": provenance.array_digests(jax.device_get(state)),
    }
    if config is not None:
        record.update(config=config, config_digest=config_digest(config))
    provenance.write_sealed_json(folder / RECORD, record)


def as_format1(folder: Path) -> None:
    """Rewrite a checkpoint saved by the CheckpointManager in format 1's layout, arrays untouched."""
    record = provenance.read_sealed_json(folder / RECORD)
    shutil.move(folder / STEP_METADATA, folder / "state" / STEP_METADATA)
    (folder / "commit_success.txt").unlink()
    shutil.rmtree(folder / "metrics", ignore_errors=True)
    record.update(format=1, files=provenance.file_digests(folder / "state"))
    provenance.write_sealed_json(folder / RECORD, record)


def test_keep_two_latest_and_the_best_by_accuracy_with_the_config_as_orbax_metadata(tmp_path):
    ckpt = Checkpoints(tmp_path, config=CONFIG)
    for step, accuracy in ((1, 0.2), (2, 0.5), (3, 0.4)):  # not what the loop does (it saves only improvements)
        ckpt.save_latest(step, _state(step))
        ckpt.save_best(step, _state(step), {"accuracy": accuracy})
    ckpt.close()
    assert ckpt.steps("latest") == [2, 3] and ckpt.steps("best") == [2]  # best_fn: the highest accuracy
    for kind in ("latest", "best"):
        assert sorted(p.name for p in (tmp_path / "checkpoints" / kind).iterdir() if not p.name.isdigit()) == []
    with ocp.CheckpointManager(tmp_path / "checkpoints" / "best") as manager:  # orbax's own reading
        assert manager.metadata(2).custom_metadata == {"config": CONFIG, "config_digest": config_digest(CONFIG)}
        assert manager.metrics(2) == {"accuracy": 0.5}
    assert Checkpoints(tmp_path).saved_config("latest", 3)["config"] == CONFIG
    np.testing.assert_array_equal(Checkpoints(tmp_path).restore_best(_state())["params"]["w"], np.full((4, 3), 2.0))


def test_a_kill_before_orbaxs_rename_leaves_no_checkpoint_and_the_next_save_cleans_up(tmp_path, monkeypatch):
    """The seal is the last write before orbax's one rename: stopped there, the step folder does not
    exist (only ``.tmp-<step>...``), the previous checkpoint is intact, and the next save removes the
    leftover; a pruned checkpoint left in ``.deleted/`` is never read and removed too."""
    ckpt = Checkpoints(tmp_path, config=CONFIG)
    ckpt.save_latest(1, _state(1.0))

    def killed(folder: Path) -> None:
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(ckpt, "_seal", killed)
    ckpt._managers.clear()  # managers made from now on seal with the dying _seal
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_latest(2, _state(2.0))
    monkeypatch.undo()
    latest = tmp_path / "checkpoints" / "latest"
    assert [p.name for p in latest.iterdir() if p.name.startswith(".tmp-")] and ckpt.steps("latest") == [1]
    again = Checkpoints(tmp_path, config=CONFIG)
    assert again.newest_intact("latest") == (1, [])
    (latest / DELETED / "0").mkdir(parents=True)  # a kill between orbax's prune-rename and the deletion
    for step in (2, 3):
        again.save_latest(step, _state(float(step)))
    assert sorted(p.name for p in latest.iterdir()) == ["2", "3"]


def test_format1_checkpoints_verify_restore_and_are_pruned_with_new_ones(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (3, 6):
        save_format1(root / "latest" / str(step), _state(float(step)), CONFIG)
    save_format1(root / "best" / "6", _state(6.0), None)  # saved before configs were sealed
    ckpt = Checkpoints(tmp_path, config=CONFIG)
    assert ckpt.newest_intact("latest") == (6, [])
    assert ckpt.saved_config("latest", 6)["config"] == CONFIG and ckpt.saved_config("best", 6) is None
    np.testing.assert_array_equal(ckpt.restore("latest", 6, _state())["params"]["w"], np.full((4, 3), 6.0))
    flip_bit(root / "latest" / "6" / "state" / "manifest.ocdbt", np.random.default_rng(0))
    with pytest.raises(CorruptCheckpointError, match="latest/6 is corrupt"):
        ckpt.verify("latest", 6)
    ckpt.set_aside("latest", 6)
    ckpt.save_latest(9, _state(9.0))
    ckpt.save_latest(12, _state(12.0))
    assert ckpt.steps("latest") == [9, 12]  # the format-1 checkpoint pruned like any other
    ckpt.save_best(9, _state(9.0), {"accuracy": 0.5})
    # a format-1 best has no metrics for best_fn to rank: kept (never lose one); restore_best takes the newest
    assert ckpt.steps("best") == [6, 9]
    np.testing.assert_array_equal(ckpt.restore_best(_state())["params"]["w"], np.full((4, 3), 9.0))
    ckpt.close()


@pytest.mark.slow  # a whole smoke run resumed (~20 CPU-s); the unit test above covers format 1's verify/restore/prune
def test_a_run_with_format1_checkpoints_resumes_to_the_uninterrupted_result(
    finished_smoke_run, smoke_data_dir, tmp_path
):
    from lra.train import train_and_evaluate
    from test_run_safety import SAME
    from test_train import smoke

    workdir = tmp_path / "run"
    shutil.copytree(finished_smoke_run[0], workdir)
    (workdir / "result.json").unlink()
    shutil.rmtree(workdir / "checkpoints" / "latest" / "6")  # resume at step 3: three steps trained again
    for folder in [workdir / "checkpoints" / "latest" / "3", *(workdir / "checkpoints" / "best").iterdir()]:
        as_format1(folder)
    result = train_and_evaluate(smoke(smoke_data_dir), workdir)
    assert {k: result[k] for k in SAME} == {k: finished_smoke_run[1][k] for k in SAME}
    assert provenance.read_sealed_json(workdir / "checkpoints" / "latest" / "6" / RECORD)["format"] == 2
    assert json.loads((workdir / "result.json").read_text())["test_accuracy"] == finished_smoke_run[1]["test_accuracy"]
