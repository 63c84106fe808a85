"""Rules as data: a registered study is a frozen record of its design and its test, judged by one
shared function per kind of test (issue 53 item 5).

Before this module each registered study (``convluna_confirm``, ``convluna_long``,
``convluna_appendix``) wrote its own judges, copying each other's record reading and statistics, and
a judge's source was its rule signature (``lra_lab.reproduce.audit``), so no shared line could be fixed
without moving every claim's rule commit. Here a claim's rule is **data**: a :class:`Design` (where
its records are, their seeds, task, steps, the config fields every record must have and the device
and program it must have run on) and a test (:class:`Superiority`, :class:`Attribution`,
:class:`Equivalence`, :class:`Contrast`, :class:`TradeOff`: rows, endpoint, margins, alpha and the
verdict's words), together a :class:`Registration`. Its :meth:`Registration.digest` (SHA-256 of the
canonical JSON) is the claim's rule signature in the new form; the judge is
``Registration.judge``, the one function of its kind. The judging functions are tested on their own
(``tests/test_rules.py``), and the audit's fingerprint covers them: a change to this module after a
claim's records makes the claim exploratory unless the same-outcome check shows its outcome unchanged.

Claims registered before this module (their judge's source as signature) say so: a migrated
registration sets ``first_form="source"``, and the audit then follows its signature back through
the source form to the commit where that rule was first fixed, and checks that the judge of the last
source-form commit and this one give byte-identical outcomes on its records.

Statistics: the paired one-sided t of ``evidence.paired_greater`` (scipy), Holm from statsmodels
(``evidence.holm``), the paired two one-sided tests from statsmodels
(``statsmodels.stats.weightstats.ttost_paired``; ``tests/test_rules.py`` shows it equal to the
hand-written TOST the registered judges ran, on the committed records' numbers).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lra_lab.reproduce import evidence
from lra_lab.reproduce.claims import INCOMPLETE, NOT_REPRODUCED, PARTLY, REPRODUCED, Claim, Outcome

SOURCE, DATA = "source", "data"  # the two forms of a rule signature


@dataclasses.dataclass(frozen=True)
class Design:
    """Where a study's records are and what makes a record this design's: its seeds, task and steps
    (``evidence.seed_accuracies``), the config fields every run's config.json must hold
    (``settings``, in order: the first that differs is named), and the device and program it must
    have run on (``program``: (device kind, seeds in one program); None: the row's most common)."""

    runs: str  # the folder of exported runs: <runs>/<task>_<slug of the row>/seed<k>/
    task: str
    seeds: tuple[int, ...]
    steps: int
    settings: tuple[tuple[str, Any], ...]
    program: tuple[str, int | None] | None = None

    def run_dir(self, label: str) -> str:
        from lra_lab.experiments.sweep import slug

        return f"{self.runs}/{self.task}_{slug(label)}"

    def records(self, *labels: str) -> tuple[str, ...]:
        return tuple(f"{self.run_dir(label)}/seed{k}/result.json" for label in labels for k in self.seeds)


def settings_problem(root: Path, rel: str, settings: tuple[tuple[str, Any], ...]) -> str | None:
    """Why a run's config.json is not the design's (None: it is)."""
    from lra.training.run_files import flatten_config

    config = evidence.read_json(root / Path(rel).parent / "config.json")
    if config is None:
        return "its config.json is missing"
    flat = flatten_config(config)
    for field, value in settings:
        if flat.get(field) != value:
            return f"its config has {field}={flat.get(field)!r}, the design {value!r}"
    return None


def accuracies(root: Path, design: Design, label: str) -> tuple[dict[int, float], list[str]]:
    """A row's test accuracy (%) per seed, only from finished runs of this design; and what is missing."""
    run_dir = design.run_dir(label)
    found, missing = evidence.seed_accuracies(
        root, run_dir, design.seeds, steps=design.steps, variant=label, task=design.task, program=design.program
    )
    for k in list(found):
        rel = f"{run_dir}/seed{k}/result.json"
        why = settings_problem(root, rel, design.settings)
        if why:
            del found[k]
            missing.append(f"{rel} ({why})")
    return found, missing


def rows(root: Path, design: Design, labels: tuple[str, ...]) -> tuple[dict[str, dict[int, float]], list[str]]:
    acc, missing = {}, []
    for label in labels:
        acc[label], miss = accuracies(root, design, label)
        missing += miss
    return acc, missing


def final_train_loss(root: Path, design: Design, label: str, seed: int, window: int) -> float | None:
    """Mean logged training loss over the last ``window`` steps (None: no such records)."""
    path = root / design.run_dir(label) / f"seed{seed}" / "metrics.jsonl"
    losses = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(rec, dict)
            and rec.get("split") == "train"
            and isinstance(rec.get("step"), int)
            and rec["step"] > design.steps - window
            and isinstance(rec.get("loss"), (int, float))
            and math.isfinite(rec["loss"])
        ):
            losses.append(float(rec["loss"]))
    return sum(losses) / len(losses) if losses else None


def late_gain(root: Path, design: Design, label: str, window: int) -> tuple[float, int, int] | None:
    """Descriptive: mean validation gain (points) over the last ``window`` steps, and seeds that rose / all."""
    gains = []
    for k in design.seeds:
        path = root / design.run_dir(label) / f"seed{k}" / "metrics.jsonl"
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        val = {}
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("split") == "validation" and isinstance(rec.get("accuracy"), float):
                val[rec.get("step")] = rec["accuracy"]
        if design.steps in val and design.steps - window in val:
            gains.append(100.0 * (val[design.steps] - val[design.steps - window]))
    if not gains:
        return None
    return sum(gains) / len(gains), sum(g > 0 for g in gains), len(gains)


def curves(root: Path, design: Design, labels: tuple[str, ...], names: Mapping[str, str], window: int | None) -> str:
    """The descriptive late-curve clause of a statistic (empty without a window or curves)."""
    if window is None:
        return ""
    parts = []
    for label in labels:
        g = late_gain(root, design, label, window)
        if g is not None:
            parts.append(f"{names[label]} {g[0]:+.2f} ({g[1]} of {g[2]} seeds rose)")
    return (
        f"; curves (descriptive): validation gain over the last {window:,} steps " + ", ".join(parts) if parts else ""
    )


def tost_p(a: Mapping[int, float], b: Mapping[int, float], margin: float) -> tuple[float, float, int]:
    """Paired two one-sided tests over the seeds both have: mean a - b and the larger one-sided p for
    |a - b| < margin (statsmodels' ``ttost_paired``); zero spread decides by the mean alone."""
    import numpy as np
    from statsmodels.stats.weightstats import ttost_paired

    seeds = sorted(set(a) & set(b))
    diffs = [a[k] - b[k] for k in seeds]
    n = len(diffs)
    if n < 2:
        raise ValueError("an equivalence test needs at least 2 seeds in common")
    mean = sum(diffs) / n
    if max(diffs) == min(diffs):  # zero spread: t is undefined
        return mean, (0.0 if abs(mean) < margin else 1.0), n
    p = ttost_paired(np.array([a[k] for k in seeds]), np.array([b[k] for k in seeds]), -margin, margin)[0]
    return mean, float(p), n


def beyond_margin_p(a: Mapping[int, float], b: Mapping[int, float], margin: float) -> float:
    """One-sided paired t p for |mean a - b| > margin, in the direction of the observed mean difference
    (statsmodels' one-sample t on the differences signed that way, against the margin)."""
    from statsmodels.stats.weightstats import DescrStatsW

    seeds = sorted(set(a) & set(b))
    diffs = [a[k] - b[k] for k in seeds]
    mean = sum(diffs) / len(diffs)
    if max(diffs) == min(diffs):  # zero spread: t is undefined
        return 0.0 if abs(mean) > margin else 1.0
    signed = [d if mean >= 0 else -d for d in diffs]
    return float(DescrStatsW(signed).ttest_mean(margin, alternative="larger")[1])


def _gain_verdict(gain: float, p: float, min_gain: float, alpha: float) -> str:
    if gain >= min_gain and p < alpha:
        return REPRODUCED
    if gain > 0 and p < alpha:
        return PARTLY
    return NOT_REPRODUCED


def _both_one_neither(first: bool, second: bool) -> str:
    return REPRODUCED if first and second else PARTLY if first or second else NOT_REPRODUCED


def _ours(acc: Mapping[str, Mapping[int, float]], names: Mapping[str, str], order: tuple[str, ...]) -> str:
    return ", ".join(f"{names[label]} {evidence.fmt_mean_std(list(acc[label].values()))}" for label in order)


@dataclasses.dataclass(frozen=True)
class Superiority:
    """Paired superiority: ``winner`` beats ``loser`` by >= ``min_gain`` points of test accuracy with a
    one-sided paired t p < ``alpha``: reproduced; positive and significant but smaller: partly; else
    not reproduced. Optional, never deciding: the final train loss over the last ``secondary_window``
    steps (paired one-sided t in the claim's direction) and each row's validation gain over the last
    ``curve_window`` steps."""

    winner: str
    loser: str
    min_gain: float
    alpha: float
    names: tuple[tuple[str, str], ...]  # row label -> its name in the outcome's text
    prefix: str = ""  # the statistic's opening words
    secondary_window: int | None = None
    curve_window: int | None = None
    kind: str = "paired superiority"

    def judge(self, root: Path, design: Design) -> Outcome:
        names = dict(self.names)
        acc, missing = rows(root, design, (self.winner, self.loser))
        if missing:
            return Outcome(INCOMPLETE, missing=tuple(missing))
        a, b = acc[self.winner], acc[self.loser]
        gain, p, n = evidence.paired_greater(a, b)
        ours = _ours(acc, names, (self.winner, self.loser))
        core = f"paired gain {gain:+.2f} points over {n} seeds, one-sided paired t p = {p:.3g}"
        if self.secondary_window is not None:
            stat = f"{self.prefix}primary: {core}; {self._secondary(root, design, names)}"
        else:
            stat = self.prefix + core
        stat += curves(root, design, (self.winner, self.loser), names, self.curve_window)
        return Outcome(_gain_verdict(gain, p, self.min_gain, self.alpha), ours, stat)

    def _secondary(self, root: Path, design: Design, names: Mapping[str, str]) -> str:
        window = self.secondary_window
        assert window is not None
        losses = [
            {k: final_train_loss(root, design, label, k, window) for k in design.seeds}
            for label in (self.winner, self.loser)
        ]
        a, b = ({k: -v for k, v in rows.items() if v is not None} for rows in losses)  # lower loss is better
        if len(set(a) & set(b)) < 2:
            return "secondary (final train loss): not enough records"
        gain, p, n = evidence.paired_greater(a, b)
        return (
            f"secondary: final train loss {names[self.winner]} lower by {gain:.3f} nats (mean of the last "
            f"{window} steps' logged losses), one-sided paired t p = {p:.3g} over {n} seeds"
        )


def _family(name: str) -> str:
    """``ConvLuna-16`` -> ``ConvLuna``: a row's family without its memory size."""
    return name.rsplit("-", 1)[0]


@dataclasses.dataclass(frozen=True)
class Attribution:
    """Table 3's ablation: first ``winner`` must beat ``loser`` (positive, one-sided paired t p <
    ``alpha``), else not reproduced. Then, Holm over two one-sided paired tests: ``carrier`` carries
    the gain if it beats ``loser`` with a mean gain >= ``share`` of the winner's; ``minor`` adds little
    if its mean gain over ``loser`` is < ``share`` of it and it is below ``winner``. Both: reproduced;
    one: partly; neither: not reproduced."""

    winner: str
    loser: str
    carrier: str
    minor: str
    share: float
    alpha: float
    names: tuple[tuple[str, str], ...]
    kind: str = "paired attribution with Holm"

    def judge(self, root: Path, design: Design) -> Outcome:
        names = dict(self.names)
        acc, missing = rows(root, design, (self.winner, self.loser, self.carrier, self.minor))
        if missing:
            return Outcome(INCOMPLETE, missing=tuple(missing))
        win, lose, carry, minor = (acc[label] for label in (self.winner, self.loser, self.carrier, self.minor))
        ours = _ours(acc, names, (self.loser, self.winner, self.carrier, self.minor))
        full_gain, p_full, n = evidence.paired_greater(win, lose)
        if not (full_gain > 0 and p_full < self.alpha):
            return Outcome(
                NOT_REPRODUCED,
                ours,
                f"{names[self.winner]}'s gain over {names[self.loser]} "
                f"{full_gain:+.2f} points, one-sided paired t p = {p_full:.3g} over "
                f"{n} seeds",
                detail=f"no significant gain over {names[self.loser]} to attribute",
            )
        carry_gain, p_carry, _ = evidence.paired_greater(carry, lose)
        minor_loss, p_minor, _ = evidence.paired_greater(win, minor)
        q_carry, q_minor = evidence.holm([p_carry, p_minor])
        minor_gain = full_gain - minor_loss  # the minor row's mean gain over the loser (same seeds)
        carries = carry_gain >= self.share * full_gain and q_carry < self.alpha
        little = minor_gain < self.share * full_gain and q_minor < self.alpha
        w, lo, c, m = (_family(names[label]) for label in (self.winner, self.loser, self.carrier, self.minor))
        stat = (
            f"gain over {names[self.loser]}: {w} {full_gain:+.2f} (p {p_full:.3g}), {c} {carry_gain:+.2f} "
            f"(> {lo}: p_holm {q_carry:.3g}), {m} {minor_gain:+.2f} (below {w} by {minor_loss:+.2f}: "
            f"p_holm {q_minor:.3g}); paired one-sided t over {n} seeds, Holm over the two ablation tests"
        )
        return Outcome(_both_one_neither(carries, little), ours, stat)


@dataclasses.dataclass(frozen=True)
class Equivalence:
    """Paired equivalence, intersection-union: each of ``others`` within +-``margin`` points of ``base``
    by two one-sided paired t-tests (all p < ``alpha``): reproduced, said as ``shown``. Otherwise not
    reproduced, said as ``different`` when one differs beyond the margin (one-sided paired t p <
    ``alpha``) and as ``inconclusive`` (its words begin so) when neither is shown."""

    base: str
    others: tuple[str, ...]
    order: tuple[str, ...]  # the rows in the order they are read and shown
    margin: float
    alpha: float
    names: tuple[tuple[str, str], ...]
    against: str  # e.g. "memory 16"
    shown: str  # the verdicts' words; ``{margin:g}`` is filled in
    different: str
    inconclusive: str
    curve_window: int | None = None
    kind: str = "paired equivalence (TOST)"

    def judge(self, root: Path, design: Design) -> Outcome:
        names = dict(self.names)
        acc, missing = rows(root, design, self.order)
        if missing:
            return Outcome(INCOMPLETE, missing=tuple(missing))
        base = acc[self.base]
        parts, equivalent, different = [], [], []
        for label in self.others:
            diff, p_tost, n = tost_p(acc[label], base, self.margin)
            p_beyond = beyond_margin_p(acc[label], base, self.margin)
            parts.append(
                f"{names[label]} - {names[self.base]} {diff:+.2f} points (TOST p = {p_tost:.3g}, "
                f"beyond +-{self.margin:g}: p = {p_beyond:.3g}, {n} seeds)"
            )
            equivalent.append(p_tost < self.alpha)
            different.append(p_beyond < self.alpha)
        ours = _ours(acc, names, self.order)
        stat = (
            f"paired, each against {self.against}: "
            + "; ".join(parts)
            + curves(root, design, self.order, names, self.curve_window)
        )
        if all(equivalent):
            return Outcome(REPRODUCED, ours, stat, detail=self.shown.format(margin=self.margin))
        if any(different):
            return Outcome(NOT_REPRODUCED, ours, stat, detail=self.different.format(margin=self.margin))
        return Outcome(NOT_REPRODUCED, ours, stat, detail=self.inconclusive.format(margin=self.margin))


@dataclasses.dataclass(frozen=True)
class Contrast:
    """Appendix E's two tests, Holm over both at ``alpha`` (one-sided paired t): (1) ``fixed`` beats
    ``standard`` (the initial value's effect > 0); (2) the initial value's effect exceeds learning's
    (``fixed`` - ``standard`` - (``learned`` - ``fixed``) > 0). Both: reproduced; one: partly."""

    learned: str
    fixed: str
    standard: str
    alpha: float
    names: tuple[tuple[str, str], ...]
    kind: str = "paired contrast with Holm"

    def judge(self, root: Path, design: Design) -> Outcome:
        order = (self.learned, self.fixed, self.standard)
        acc, missing = rows(root, design, order)
        if missing:
            return Outcome(INCOMPLETE, missing=tuple(missing))
        learned, fixed, standard = (acc[label] for label in order)
        init_gain, p_init, n = evidence.paired_greater(fixed, standard)
        learn_gain = evidence.paired_greater(learned, fixed)[0]
        # per seed: (fixed - standard) - (learned - fixed) = (2 fixed - learned) - standard
        contrast, p_more, _ = evidence.paired_greater({k: 2 * fixed[k] - learned[k] for k in fixed}, standard)
        q_init, q_more = evidence.holm([p_init, p_more])
        helps = init_gain > 0 and q_init < self.alpha
        matters_more = contrast > 0 and q_more < self.alpha
        names = dict(self.names)
        ln, fx, st = (_family(names[label]) for label in order)
        stat = (
            f"initial value ({fx} - {st}) {init_gain:+.2f} points (one-sided paired t, p_holm {q_init:.3g}); "
            f"learning it ({ln} - {fx}) {learn_gain:+.2f}; initial value's effect minus learning's "
            f"{contrast:+.2f} (p_holm {q_more:.3g}); {n} seeds, Holm over the two tests"
        )
        return Outcome(_both_one_neither(helps, matters_more), _ours(acc, names, order), stat)


@dataclasses.dataclass(frozen=True)
class TradeOff:
    """Appendix D's stride: less accurate (``base`` beats ``fast`` on test accuracy, one-sided paired t
    p < ``alpha``) and faster (the throughput record's median over rounds of ``fast``'s steps/s over
    ``base``'s is >= ``speedup``). Both: reproduced; one: partly. ``strides``: row label -> its stride
    (the record's keys)."""

    base: str
    fast: str
    strides: tuple[tuple[str, int], ...]
    throughput: str  # the timing record
    speedup: float
    alpha: float
    names: tuple[tuple[str, str], ...]
    kind: str = "paired accuracy loss and throughput gain"

    def judge(self, root: Path, design: Design) -> Outcome:
        labels = tuple(label for label, _ in self.strides)
        stride = dict(self.strides)
        acc, missing = rows(root, design, labels)
        record = evidence.read_json(root / self.throughput)
        if not (record and record.get("rounds")):
            missing.append(self.throughput)
        if missing:
            return Outcome(INCOMPLETE, missing=tuple(missing))
        assert record is not None
        loss, p, n = evidence.paired_greater(acc[self.base], acc[self.fast])
        slow, fast = str(stride[self.base]), str(stride[self.fast])
        ratios = [r["steps_per_second"][fast] / r["steps_per_second"][slow] for r in record["rounds"]]
        speedup = statistics.median(ratios)
        per_stride = {
            s: statistics.median(r["steps_per_second"][str(s)] for r in record["rounds"]) for s in stride.values()
        }
        stat = (
            f"accuracy: stride {slow} over stride {fast} {loss:+.2f} points, one-sided paired t p = {p:.3g} over "
            f"{n} seeds; throughput at the paper's ListOps scale (length {record.get('length')}, batch "
            f"{record.get('batch_size')}): "
            + ", ".join(f"stride {s} {v:.3g} steps/s" for s, v in per_stride.items())
            + f"; stride {fast} / stride {slow} {speedup:.2f}x (median of {len(ratios)} rounds: "
            + ", ".join(f"{x:.2f}" for x in ratios)
            + ")"
        )
        verdict = _both_one_neither(speedup >= self.speedup, loss > 0 and p < self.alpha)
        return Outcome(verdict, _ours(acc, dict(self.names), labels), stat)


Test = Superiority | Attribution | Equivalence | Contrast | TradeOff


@dataclasses.dataclass(frozen=True)
class Baseline:
    """A trivial level each row is set beside (descriptive, never deciding): ``field`` of the record
    at ``record`` (a fraction), e.g. ListOps's structure-free rule on the same test split."""

    record: str
    field: str
    name: str

    def sentence(self, root: Path, acc: Mapping[str, Mapping[int, float]], names: Mapping[str, str]) -> str:
        data = evidence.read_json(root / self.record)
        value = data.get(self.field) if data else None
        if not isinstance(value, (int, float)):
            return f"{self.name}: {self.record} is missing or has no {self.field}"
        level = 100.0 * value
        rows = ", ".join(
            f"{names[label]} {evidence.mean_std(list(a.values()))[0] - level:+.1f}" for label, a in acc.items() if a
        )
        return (
            f"descriptive: {self.name} scores {level:.1f}% on this test split ({self.record}); each row's mean "
            f"from it: {rows} points"
        )


@dataclasses.dataclass(frozen=True)
class Registration:
    """A claim's rule as data: its design and its test. ``first_form``: the form it was first
    registered in (``source``: a judge whose source was its signature, migrated here; ``data``: born
    as data). ``records`` are the committed records its judge reads (``extra_records``: others than the
    design's runs, e.g. a timing record)."""

    design: Design
    test: Test
    first_form: str = DATA
    extra_records: tuple[str, ...] = ()
    baseline: Baseline | None = None  # set beside each row in the outcome's detail (not deciding)

    def __post_init__(self) -> None:
        if self.first_form not in (SOURCE, DATA):
            raise ValueError(f"first_form must be {SOURCE!r} or {DATA!r}, not {self.first_form!r}")

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "design": dataclasses.asdict(self.design),
            "test": dataclasses.asdict(self.test),
            "first_form": self.first_form,
            "extra_records": list(self.extra_records),
        }
        if self.baseline is not None:  # only when set: the digests of registrations without one stay as they were
            out["baseline"] = dataclasses.asdict(self.baseline)
        return out

    def digest(self) -> str:
        """SHA-256 of the canonical JSON: the rule signature of a claim registered in the new form."""
        text = json.dumps(self.as_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def labels(self) -> tuple[str, ...]:
        """Every row the test reads, in its reading order."""
        test = self.test
        if isinstance(test, Superiority):
            return (test.winner, test.loser)
        if isinstance(test, Attribution):
            return (test.winner, test.loser, test.carrier, test.minor)
        if isinstance(test, Equivalence):
            return test.order
        if isinstance(test, Contrast):
            return (test.learned, test.fixed, test.standard)
        return tuple(label for label, _ in test.strides)

    def records(self) -> tuple[str, ...]:
        return self.design.records(*self.labels()) + self.extra_records

    def judge(self, root: Path) -> Outcome:
        """The outcome on the records under ``root``: the one judge of this registration's kind of test.
        A rule born as data says "no records yet" while none exists; the baseline, if any, is set beside
        the rows of a judged outcome."""
        if self.first_form == DATA and not any((root / r).exists() for r in self.records()):
            return Outcome(INCOMPLETE, missing=self.records(), detail="no records yet: the study has not run")
        outcome = self.test.judge(root, self.design)
        if self.baseline is None or outcome.verdict == INCOMPLETE:
            return outcome
        acc, _ = rows(root, self.design, self.labels())
        names = dict(getattr(self.test, "names", ()))
        sentence = self.baseline.sentence(root, acc, names)
        return dataclasses.replace(outcome, detail=f"{outcome.detail}; {sentence}" if outcome.detail else sentence)


def claim(
    claim_id: str,
    where: str,
    statement: str,
    paper_numbers: str,
    experiment: str,
    rule: str,
    registration: Registration,
    commands: tuple[str, ...],
    **fields: Any,
) -> Claim:
    """A claim registered as data: its judge is the registration's, its records the registration's."""
    return Claim(
        claim_id,
        where,
        statement,
        paper_numbers,
        experiment,
        rule,
        registration.judge,
        commands,
        registration.records(),
        registration=registration,
        **fields,
    )


def settings(mapping: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """A design's config fields as data (ordered pairs: the first that differs is named)."""
    return tuple(mapping.items())
