"""The reports: ``results/reproductions/<paper>/report.md`` and the verdict table over all papers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lra_lab.reproduce import audit, record_evidence, sampling_noise
from lra_lab.reproduce.claims import INCOMPLETE, INCONCLUSIVE, NOT_TESTABLE, REPO, Claim, Outcome, Paper

OUT = Path("results/reproductions")
PILOT_CURVES = Path("results/listops_pilot/curves.png")  # the ConvLuna ListOps pilot (issue 35), drawn apart


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def rule_heading(registration: audit.Registration | None) -> str:
    """"Rule (fixed before the runs)" only where git shows it (lra_lab.reproduce.audit)."""
    if registration is None or registration.label == audit.NO_HISTORY:
        return "Rule (registration not checked: no git history here)"
    if registration.label == audit.PRE_REGISTERED:
        assert registration.rule_commit is not None  # judge_registration: only NOT_COMMITTED has none
        return f"Rule (fixed before the runs: committed in {registration.rule_commit[:7]}, before every record)"
    if registration.label == audit.NO_RECORDS:
        assert registration.rule_commit is not None
        return f"Rule (committed in {registration.rule_commit[:7]}; no records yet)"
    if registration.label == audit.NOT_COMMITTED:
        return "Rule (not committed as it reads here)"
    why = audit.why_exploratory(registration.reasons)
    return f"Rule (EXPLORATORY: {why}, by git: " + "; ".join(registration.reasons) + ")"


def claim_section(paper: Paper, claim: Claim, outcome: Outcome,
                  registration: audit.Registration | None = None, root: Path | None = None) -> str:
    lines = [f"## `{claim.id}`: {claim.where}: **{outcome.verdict}**", "", f"*Claim.* {claim.statement}", "",
             f"*Paper.* {claim.paper_numbers}", ""]
    if claim.testable:
        lines += [f"*Experiment.* {claim.experiment}", "", f"*{rule_heading(registration)}.* {claim.rule}", ""]
    else:
        lines += [f"*What would test it.* {claim.experiment}", ""]
    if outcome.ours:
        lines += [f"*Ours.* {outcome.ours}", ""]
    if claim.cannot_fail:
        lines += [f"*Could not fail at this scale.* {claim.cannot_fail}", ""]
    if outcome.verdict == INCONCLUSIVE:
        lines += ["*Kind.* inconclusive: its rule's verdict is \"not reproduced\" with neither the effect nor its "
                  "absence shown; counted apart from \"not reproduced\" (evidence against the claim)", ""]
    noise = sampling_noise.sentence(root, claim.records) if claim.testable and root is not None else ""
    if noise:
        lines += [f"*Test-set noise.* {noise[0].upper()}{noise[1:]}", ""]
    if outcome.statistic:
        lines += [f"*Statistic.* {outcome.statistic}", ""]
    if outcome.detail and claim.testable:
        lines += [f"*Note.* {outcome.detail}", ""]
    if outcome.verdict == INCOMPLETE:
        lines += ["*Missing records* (run the commands below):", ""] + [f"- `{m}`" for m in outcome.missing] + [""]
    if claim.commands:
        cost = f" (about {claim.cpu_minutes:g} min on a 2-core CPU)" if claim.cpu_minutes and claim.testable else ""
        lines += [f"*Commands*{cost}:", "", "```bash"] + list(claim.commands) + ["```", ""]
    if claim.records:
        lines += ["*Records:* " + ", ".join(f"`{r}`" for r in dict.fromkeys(
            r.rsplit("/seed", 1)[0] if "/seed" in r else r for r in claim.records)), ""]
    return "\n".join(lines)


def paper_report(paper: Paper, outcomes: dict[str, Outcome], figures: list[str],
                 registrations: dict[str, audit.Registration] | None = None,
                 captions: dict[str, str] | None = None, root: Path | None = None) -> str:
    regs = registrations or {}
    head = [f"# {paper.title}", "", f"{paper.citation}. Regenerate: `python -m lra_lab.reproduce {paper.key}` "
            "(runs what is missing, then rewrites this page; `--dry-run` lists the commands).", "",
            "Verdicts are computed by `lra_lab/reproduce/" + paper.key + ".py` from the records named under each claim.",
            "", "| claim | where | verdict | registration | ours | test-set 95% (Wilson) |", "|---|---|---|---|---|---|"]
    head += [f"| `{c.id}` | {_cell(c.where)} | {outcomes[c.id].verdict} | {_registration_cell(regs.get(c.id), c)} | "
             f"{_cell(_ours(c, outcomes[c.id].ours or ''))} | {_cell(_noise_cell(root, c))} |" for c in paper.claims]
    head += [""] + [f"![{_alt(f)}]({f})" for f in figures] + ([""] if figures else [])
    for caption in (captions or {}).values():
        head += [f"*{caption}*", ""]
    return "\n".join(head + [claim_section(paper, c, outcomes[c.id], regs.get(c.id), root) for c in paper.claims])


def _alt(figure: str) -> str:
    return "EXPLORATORY ListOps pilot (one seed per row): learning curves" if "listops_pilot" in figure else figure


def _ours(claim: Claim, ours: str) -> str:
    """Our numbers, after the warning that the rule could not fail at this scale (when it could not)."""
    return f"could not fail at this scale (see its report); {ours}" if claim.cannot_fail and ours else ours


def _noise_cell(root: Path | None, claim: Claim) -> str:
    """Each accuracy row's Wilson interval over its test examples (lra_lab.reproduce.sampling_noise)."""
    if root is None or not claim.testable:
        return ""
    return "; ".join(f"{row} [{100 * lo:.1f}, {100 * hi:.1f}]" for row, _, _, (lo, hi) in
                     sampling_noise.rows(root, claim.records))


def _registration_cell(registration: audit.Registration | None, claim: Claim) -> str:
    if not claim.testable:
        return ""
    if registration is None:
        return "not checked"
    older = " (its records predate code-tree hashes)" if registration.label == audit.PRE_REGISTERED and any(
        record_evidence.PREDATES in e for e in registration.old_evidence) else ""
    return registration.short + older


def index(results: dict[str, tuple[Paper, dict[str, Outcome]]],
          registrations: dict[str, audit.Registration] | None = None, root: Path | None = None) -> str:
    regs = registrations or {}
    lines = ["# Reproductions: each paper's claims at laptop scale", "",
             "One row per claim, verdicts computed from committed records by `python -m lra_lab.reproduce PAPER` "
             "(`--list` prints this table). \"not testable here\" names the data or hardware that would test it; "
             "\"incomplete\" lists the missing runs in the paper's report; \"inconclusive\" is a test that showed "
             "neither the effect nor its absence, counted apart from \"not reproduced\" (evidence against). The "
             "last column is the test set's own noise: the binomial 95% interval (Wilson) of one seed's accuracy at "
             "each row's mean on its test examples (`lra_lab/reproduce/sampling_noise.py`).", "",
             "The registration column is `python -m lra_lab.reproduce --audit`'s: *pre-registered* where git shows the "
             "rule (words and judge code) committed before every record it judges, *exploratory* where it does not, or "
             "where a record ran on uncommitted code, is not its commit's code or was edited after it was written, or "
             "where a file its judge runs changed after the data and no check shows the outcome unchanged. Records "
             "written before code-tree hashes (issue 53) name their commit without proving it: such labels say so.",
             "", "| paper | claim | where | verdict | registration | ours | test-set 95% (Wilson) |",
             "|---|---|---|---|---|---|---|"]
    for key, (paper, outcomes) in results.items():
        for c in paper.claims:
            o = outcomes[c.id]
            ours = o.ours if o.verdict not in (INCOMPLETE, NOT_TESTABLE) else (
                f"missing {len(o.missing)} record(s)" if o.verdict == INCOMPLETE else "")
            reg = _registration_cell(regs.get(f"{key}/{c.id}"), c)
            lines.append(f"| [{key}]({key}/report.md) | `{c.id}` | {_cell(c.where)} | {o.verdict} | {reg} | "
                         f"{_cell(_ours(c, ours))} | {_cell(_noise_cell(root, c))} |")
    counts: dict[str, int] = {}
    for _, outcomes in results.values():
        for o in outcomes.values():
            counts[o.verdict] = counts.get(o.verdict, 0) + 1
    lines += ["", "Totals: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + "."]
    return "\n".join(lines) + "\n"


def structure_free_baseline(root: Path, record_dirs: list[str]) -> tuple[dict[str, Any] | None, str | None]:
    """ListOps's structure-free baseline on the data of the first run found under ``record_dirs``
    (lra.reports.listops_baseline; every row of one study trains on the same data), and its sentence."""
    from lra.reports.table_curves import first_baseline

    return first_baseline(path for d in record_dirs for path in sorted((root / d).glob("seed*/config.json")))


def paper_figures(paper: Paper, root: Path) -> tuple[list[str], dict[str, str]]:
    """Draw the paper's figures from its records into its report folder; returns their file names
    and, for some, a caption (what a reference line in it is)."""
    out = root / OUT / paper.key
    names: list[str] = []
    captions: dict[str, str] = {}
    if paper.key == "clustered":
        from lra_lab.reproduce import clustered, figures

        grid, missing = clustered.masked_copy_grid(root)
        if grid:
            figures.heatmaps(grid, clustered.LENGTHS, clustered.CLUSTERS, out / "fig5_masked_copy.png",
                             "masked copy, one seed per cell; training steps per L: " + ", ".join(
                                 f"{L}: {n:,}" for L, n in clustered.STEPS.items()))
            names.append("fig5_masked_copy.png")
    if paper.key == "convluna":
        from lra.reports.listops_baseline import line as baseline_line
        from lra_lab.reproduce import convluna, convluna_confirm, figures

        for module, name, title in (
            (convluna, "listops_rows.png", f"ConvLuna paper's ListOps rows at laptop scale: {convluna.SCALE}"),
            (convluna_confirm, "listops_rows_confirm.png", f"CONFIRMATORY ListOps rows: {convluna_confirm.SCALE}"),
        ):
            rows = module.rows_with_runs(root)
            if rows:
                baseline, sentence = structure_free_baseline(root, [module.run_dir(label) for label in rows])
                figures.seed_dots(rows, out / name, title, None if baseline is None else 100 * baseline["test_accuracy"])
                names.append(name)
                if baseline is not None:
                    captions[name] = (f"In {name} the dashed line is the {baseline_line(baseline, 'test')} "
                                      "(`python -m lra.reports.listops_baseline`).")
                elif sentence:
                    captions[name] = f"{name}: {sentence}"
        if (root / PILOT_CURVES).exists():  # exploratory: it chose the confirmatory design, it judges nothing
            names.append("../../" + PILOT_CURVES.relative_to("results").as_posix())
    if paper.key == "agglomerative":
        from lra_lab.reproduce import agglomerative, evidence, figures

        record = evidence.read_json(root / agglomerative.RECORD)
        if record and record.get("rows"):
            figures.timing_plot(record, out / "fig1_timing.png")
            names.append("fig1_timing.png")
    return names, captions


def _keep_determined_labels(root: Path, registration: audit.Registration) -> None:
    """Refuse to write "cannot tell" over registration labels a full history determined (issue 52 RP2,
    RP4): the committed reports keep theirs. InputError (exit 2) saying why and what to do."""
    from lra.errors import InputError

    existing = root / OUT / "README.md"
    if existing.exists() and "cannot tell" not in existing.read_text(errors="replace"):
        why = "; ".join(registration.reasons) or "no git history here"
        raise InputError(
            f"cannot tell here which claims were pre-registered ({why}); {existing.relative_to(root)} and the "
            "reports keep the labels a full history gave them. Rerun in a full clone to rewrite them")


def write(papers: dict[str, Paper], root: Path = REPO, selected: list[str] | None = None) -> list[Path]:
    """Rewrite the selected papers' reports and the index over all papers; returns the files written."""
    from lra.training.run_files import write_text_atomic

    results = {key: (paper, {c.id: c.outcome(root) for c in paper.claims}) for key, paper in papers.items()}
    claims = {f"{k}/{c.id}": c.records for k, p in papers.items() for c in p.claims}
    regs = audit.audit(root, claims, audit.default_cache())
    undetermined = next((r for r in regs.values() if r.label == audit.NO_HISTORY), None)
    if undetermined is not None:
        _keep_determined_labels(root, undetermined)
    written = []
    for key in selected or list(papers):
        paper, outcomes = results[key]
        path = root / OUT / key / "report.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        mine = {c.id: regs[f"{key}/{c.id}"] for c in paper.claims}
        names, captions = paper_figures(paper, root)
        write_text_atomic(path, paper_report(paper, outcomes, names, mine, captions, root))
        written.append(path)
    index_path = root / OUT / "README.md"
    write_text_atomic(index_path, index(results, regs, root))
    return written + [index_path]
