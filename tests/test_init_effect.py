"""lra_lab.reference.init_effect: the pre-registered rule on hand-made run folders (no training)."""

import json

from lra_lab.reference.init_effect import family_effect, main


def _run(root, init, seed, losses, accuracy):
    run = root / f"convluna-16-reference-{init}" / f"seed{seed}"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"step": 10 * (i + 1), "split": split, "loss": loss}) + "\n"
            for i, loss in enumerate(losses)
            for split in ("train", "memory")
        )
    )
    (run / "result.json").write_text(json.dumps({"test_accuracy": accuracy, "git_commit": "abc"}))


def _grid(root, offset_pytorch, accuracies_pytorch):
    for seed, acc in zip(range(3), (0.36, 0.37, 0.38), strict=False):
        base = [2.0 - 0.01 * i + 0.001 * seed for i in range(60)]
        _run(root, "xavier", seed, base, acc)
        _run(root, "pytorch", seed, [v + offset_pytorch for v in base], accuracies_pytorch[seed])


def test_same_curves_and_accuracies_do_not_matter(tmp_path):
    _grid(tmp_path, 0.0, (0.36, 0.37, 0.38))
    r = family_effect(tmp_path, "convluna", window=5)
    assert r["seeds"] == [0, 1, 2] and r["mean_difference"] == 0 and r["matters"] is False


def test_a_gap_larger_than_between_seeds_matters(tmp_path):
    _grid(tmp_path, 0.05, (0.36, 0.37, 0.38))  # seeds differ by 0.001-0.002 in loss, inits by 0.05
    r = family_effect(tmp_path, "convluna", window=5)
    assert r["matters"] is True and min(r["loss_gap_between_inits"]) > max(r["loss_gap_between_seeds"])


def test_an_accuracy_shift_beyond_the_seed_spread_matters(tmp_path):
    _grid(tmp_path, 0.0, (0.46, 0.47, 0.48))
    r = family_effect(tmp_path, "convluna", window=5)
    assert r["matters"] is True and abs(r["mean_difference"] - 0.10) < 1e-9


def test_command_writes_its_report_or_names_the_missing_runs(tmp_path, capsys):
    assert main([str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "no finished pairs" in capsys.readouterr().err
    _grid(tmp_path, 0.0, (0.36, 0.37, 0.38))
    assert main([str(tmp_path), "--out", str(tmp_path / "out"), "--families", "convluna", "--note", "hello"]) == 0
    text = (tmp_path / "out" / "init_effect.md").read_text()
    assert "| convluna-16 (reference) | 0,1,2 |" in text and "hello" in text
