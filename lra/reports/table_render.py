"""A results table as markdown and LaTeX (booktabs), its caption and its Friedman/Holm tests as tables."""

from __future__ import annotations

import math
import re

from lra.reports import stats
from lra.reports.table_build import Table
from lra.reports.table_runs import column_name, family

STD_NOTE = "sample std (ddof=1)"
PM = r"$\pm$"


def _number(cell: stats.Cell, bold: bool, latex: bool) -> str:
    mean = f"{cell.mean:.2f}"
    if latex:
        mean = rf"\mathbf{{{mean}}}" if bold else mean
        return f"${mean}$" if math.isnan(cell.std) else f"${mean} \\pm {cell.std:.2f}$"
    mean = f"**{mean}**" if bold else mean
    return mean if math.isnan(cell.std) else f"{mean} ± {cell.std:.2f}"


def _cell_text(table: Table, variant: str, task: str, latex: bool) -> str:
    cell = table.cells.get((variant, task))
    if cell is None:
        return "--" if latex else "—"
    text = _number(cell, variant in table.best[task], latex)
    if cell.n != table.expected_n:
        text += rf" {{\scriptsize (n={cell.n})}}" if latex else f" (n={cell.n})"
    return text


def _average_text(table: Table, variant: str, latex: bool) -> str:
    avg = table.averages[variant]
    if avg is None:
        return "--" if latex else "—"
    bold = variant in table.best["Average"]
    if latex:
        return rf"$\mathbf{{{avg:.2f}}}$" if bold else f"${avg:.2f}$"
    return f"**{avg:.2f}**" if bold else f"{avg:.2f}"


def caption(table: Table) -> str:
    return (
        f"Test accuracy (%) at the best-validation checkpoint, mean ± {STD_NOTE} over "
        f"{table.expected_n} seed{'s' if table.expected_n != 1 else ''} per cell; (n=k) marks a cell with "
        f"another seed count (with fewer: incomplete, not bold, no Average). Bold: the highest mean of its "
        f"column, if that cell is complete (a column whose highest mean is incomplete has no bold)."
        + (" Average: mean over the task columns." if len(table.tasks) > 1 else "")
    )


def markdown_table(table: Table, note: str | None = None) -> str:
    """The paper-layout table; ``note`` (e.g. how the runs differ from the paper) goes under it."""
    cols = [column_name(t) for t in table.tasks] + (["Average"] if len(table.tasks) > 1 else [])
    lines = [
        f"### {table.title}",
        "",
        caption(table),
        "",
        "| Model | " + " | ".join(cols) + " |",
        "|---" * (len(cols) + 1) + "|",
    ]
    for v in table.variants:
        row = [_cell_text(table, v, t, False) for t in table.tasks]
        if len(table.tasks) > 1:
            row.append(_average_text(table, v, False))
        lines.append(f"| {v} | " + " | ".join(row) + " |")
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def _tex_escape(text: str) -> str:
    return re.sub(r"([_%&#$])", r"\\\1", text)


def latex_table(table: Table) -> str:
    cols = [column_name(t) for t in table.tasks] + (["Average"] if len(table.tasks) > 1 else [])
    title = _tex_escape(table.title.replace("`", ""))
    lines = [
        "% requires \\usepackage{booktabs}",
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{title}. {_tex_escape(caption(table)).replace('±', PM)}}}",
        r"\begin{tabular}{l" + "c" * len(cols) + "}",
        r"\toprule",
        "Model & " + " & ".join(f"{c} $\\uparrow$" for c in cols) + r" \\",
        r"\midrule",
    ]
    previous = None
    for v in table.variants:
        fam = family(v)[0]
        if previous is not None and fam != previous:
            lines.append(r"\midrule")
        previous = fam
        row = [_cell_text(table, v, t, True) for t in table.tasks]
        if len(table.tasks) > 1:
            row.append(_average_text(table, v, True))
        lines.append(f"{_tex_escape(v)} & " + " & ".join(row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(lines)


def friedman_grid(table: Table) -> tuple[list[str], dict[tuple[str, str], stats.FriedmanResult]]:
    models = list(dict.fromkeys(r.model for r in table.friedman))
    return models, {(r.model, r.task): r for r in table.friedman}


def friedman_caption(table: Table) -> str:
    tested = sum(r.tested for r in table.friedman)
    sizes = "/".join(map(str, table.friedman[0].sizes))  # one set of sizes per table (friedman_tests)
    return (
        f"Friedman test over memory sizes {sizes} per (model, task), blocks paired by seed, "
        f"H0: equal expected accuracies. Holm-corrected p-values over the {tested} tests of this table "
        f"(bold: < 0.05); n/a: not tested. Raw p-values and statistics: friedman.csv."
    )


def friedman_markdown(table: Table) -> str:
    models, grid = friedman_grid(table)
    lines = [
        f"### Friedman test — {table.title}",
        "",
        friedman_caption(table),
        "",
        "| Model | " + " | ".join(column_name(t) for t in table.tasks) + " |",
        "|---" * (len(table.tasks) + 1) + "|",
    ]
    for m in models:
        row = []
        for t in table.tasks:
            r = grid[(m, t)]
            if not r.tested:
                row.append(f"n/a ({r.note})")
            else:
                p = f"{r.p_holm:.3f}"
                row.append((f"**{p}**" if r.p_holm < 0.05 else p) + f" (n={len(r.seeds)})")
        lines.append(f"| {m} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def friedman_latex(table: Table) -> str:
    models, grid = friedman_grid(table)
    lines = [
        "% requires \\usepackage{booktabs}",
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{_tex_escape(table.title.replace('`', ''))}. {_tex_escape(friedman_caption(table))}}}",
        r"\begin{tabular}{l" + "c" * len(table.tasks) + "}",
        r"\toprule",
        "Model & " + " & ".join(column_name(t) for t in table.tasks) + r" \\",
        r"\midrule",
    ]
    for m in models:
        row = []
        for t in table.tasks:
            r = grid[(m, t)]
            if not r.tested:
                row.append("n/a")
            else:
                row.append(rf"$\mathbf{{{r.p_holm:.3f}}}$" if r.p_holm < 0.05 else f"${r.p_holm:.3f}$")
        lines.append(f"{_tex_escape(m)} & " + " & ".join(row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(lines)
