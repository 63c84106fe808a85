"""``python -m lra_lab.reproduce PAPER [--claim ID] [--list] [--dry-run] [--jobs N]``."""

from __future__ import annotations

import argparse
import os
import queue
import shlex
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lra.cpu_speed import child_environment
from lra.errors import EXIT_INVALID, EXIT_STORAGE, InputError, describe
from lra.training.hosts import ChildSignals
from lra_lab.reproduce import registry, report

EPILOG = """examples:
  python -m lra_lab.reproduce --list                         # every paper's claims and verdicts
  python -m lra_lab.reproduce dispersed                      # run what is missing, write the report
  python -m lra_lab.reproduce convluna --claim table1-listops --dry-run   # the commands it would run
"""


def _print_list(papers: dict[str, registry.Paper], root: Path) -> None:
    from lra_lab.reproduce import audit

    regs = audit.audit(root, {f"{k}/{c.id}": c.records for k, p in papers.items() for c in p.claims},
                       audit.default_cache())
    # the "where" column is as wide as its longest entry: never cut, never run into the verdict
    width = max(len(c.where) for p in papers.values() for c in p.claims)
    for key, paper in papers.items():
        print(f"{key}: {paper.title} ({paper.citation})")
        for claim in paper.claims:
            outcome = claim.outcome(root)
            extra = f" ({len(outcome.missing)} record(s) missing)" if outcome.missing else ""
            label = f"  [{regs[f'{key}/{claim.id}'].short}]" if claim.testable else ""
            print(f"  {claim.id:28s} {claim.where:{width}s}  {outcome.verdict}{extra}{label}")


def _missing_commands(claims: list[registry.Claim], root: Path) -> list[list[str]]:
    """Per claim with missing records, its commands (claims sharing a command list run it once),
    no sweep row repeated (:func:`_without_repeats`)."""
    seen: set[tuple[str, ...]] = set()
    batches = []
    for claim in claims:
        if not (claim.testable and claim.outcome(root).verdict == registry.INCOMPLETE):
            continue
        commands = claim.commands_needed(root)
        if commands and commands not in seen:
            seen.add(commands)
            batches.append(list(commands))
    return _without_repeats(batches, root)


def _without_repeats(batches: list[list[str]], root: Path) -> list[list[str]]:
    """Several claims read the same runs (Table 1's pair feeds Table 3 and Figure 2): each sweep row
    is trained by the first command that names it; later commands name only their other rows (a
    command left with none is dropped, and so is its batch's repeated export). The sweeps would skip
    finished runs anyway, but a plan that repeats rows says nothing about what is new, and two claims
    running side by side (--jobs) would start the same run twice."""
    from lra_lab.experiments import sweep_cli

    planned: set[Path] = set()
    done_commands: set[str] = set()
    out = []
    for batch in batches:
        kept, swept = [], False
        for command in batch:
            selection = sweep_cli.command_selection(command, root)
            if selection is None:  # an export or a measurement: once, unless this batch trained something
                if swept or command not in done_commands:
                    kept.append(command)
                done_commands.add(command)
                continue
            runs, _ = selection
            labels = list(dict.fromkeys(r.variant.label for r in runs))
            fresh = [label for label in labels
                     if not all(set(r.seed_workdirs) <= planned for r in runs if r.variant.label == label)]
            planned.update(w for r in runs for w in r.seed_workdirs)
            if fresh:
                kept.append(command if fresh == labels else sweep_cli.with_variants(command, fresh))
                swept = True
        if kept:
            out.append(kept)
    return out


def _print_plan(batches: list[list[str]], root: Path) -> None:
    """The dry run: each command, and under each sweep its runs as comments (done / started /
    missing / data absent, estimated CPU time: lra_lab.experiments.plan), then one summary line."""
    from lra_lab.experiments import plan, sweep_cli

    plans = []
    for batch in batches:
        for command in batch:
            print(command)
            selection = sweep_cli.command_selection(command, root)
            if selection is None:
                continue
            these = plan.plan_runs(selection[0], [root / "results" / "runs"])
            plans += these
            for item in these:
                print("#   " + plan.run_line(item).strip())
    if plans:
        print(f"# {len(plans)} runs: {plan.summary(plans)}")


CHILDREN = ChildSignals("passing it to {count} running command(s) and waiting for them to save; nothing new starts")


def _run_batch(commands: list[str], root: Path, core: int | None = None) -> int:
    """Run one claim's commands in order; with ``core``, every training process they start is pinned
    to that core after its first compile (LRA_PIN_CORE: bit-identical, lra.cpu_speed)."""
    env = child_environment()
    if core is not None:
        env["LRA_PIN_CORE"] = str(core)
        print(f"(commands of this claim pinned to core {core})", flush=True)
    for command in commands:
        if CHILDREN.signum is not None:  # a signal arrived: start nothing new
            return 128 + CHILDREN.signum
        print(f"$ {command}", flush=True)
        argv = shlex.split(command)
        if argv and argv[0] in ("python", "python3"):  # this interpreter, not PATH's (a venv not activated)
            argv[0] = sys.executable
        # its own session: a Ctrl-C reaches it once, through us (CHILDREN.forward), as sweeps do with lra.train
        child = CHILDREN.start(argv, command, cwd=root, env=env)
        try:
            rc = child.wait()
        finally:
            CHILDREN.done(child)
        if rc != 0:
            print(f"error: `{command}` exited with {rc}; its claim stays incomplete "
                  "(rerun the same command: finished runs are skipped)", file=sys.stderr)
            return rc
    return 0


def _audit(papers: dict[str, registry.Paper], root: Path, only: str | None, json_out: Path | None) -> int:
    from lra_lab.reproduce import audit

    if only and only not in papers:
        print(f"error: unknown paper {only!r}; valid: {', '.join(papers)}", file=sys.stderr)
        return EXIT_INVALID
    claims = {f"{k}/{c.id}": c.records for k, p in papers.items() for c in p.claims
              if c.testable and (only is None or k == only)}
    regs = audit.audit(root, claims, audit.default_cache())
    print(audit.audit_table(regs))
    if json_out:
        from lra.training.run_files import write_json_atomic

        try:
            write_json_atomic(json_out, audit.as_json(regs))
        except OSError as e:
            print(f"error: {describe(e)}", file=sys.stderr)
            return EXIT_STORAGE
    labels = [r.label for r in regs.values()]
    print(", ".join(f"{labels.count(x)} {x}" for x in dict.fromkeys(labels)))
    print(audit.older_evidence_summary(regs))
    print(audit.forms_summary(regs))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lra_lab.reproduce", epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     description="Test a paper's claims at laptop scale and write its report.")
    parser.add_argument("paper", nargs="?", help="convluna, clustered, agglomerative, dispersed, cheap_linear")
    parser.add_argument("--claim", help="one claim id (default: all of the paper's)")
    parser.add_argument("--list", action="store_true", help="list every claim with its current verdict")
    parser.add_argument("--dry-run", action="store_true", help="print the commands for missing records, run nothing")
    parser.add_argument("--jobs", type=int, default=1, help="claims whose commands run side by side (default 1)")
    parser.add_argument("--report-only", action="store_true", help="rewrite the reports from the records as they are")
    parser.add_argument("--audit", action="store_true",
                        help="check by git that each claim's rule was committed before every record it judges "
                             "(lra_lab.reproduce.audit) and label each claim pre-registered or exploratory")
    parser.add_argument("--json", type=Path, help="with --audit: write the audit as JSON here")
    args = parser.parse_args(argv)
    root = registry.REPO
    papers = registry.papers()
    if args.audit:
        return _audit(papers, root, args.paper, args.json)
    if args.list and not args.paper:
        _print_list(papers, root)
        return 0
    if not args.paper:
        print(f"error: name a paper ({', '.join(papers)}) or pass --list", file=sys.stderr)
        return EXIT_INVALID
    if args.jobs < 1:
        print(f"error: --jobs must be >= 1, got {args.jobs}", file=sys.stderr)
        return EXIT_INVALID
    try:
        paper, claims = registry.find(args.paper, args.claim)
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return EXIT_INVALID
    if args.list:
        _print_list({paper.key: registry.Paper(paper.key, paper.title, paper.citation, tuple(claims))}, root)
        return 0
    batches = [] if args.report_only else _missing_commands(claims, root)
    if args.dry_run:
        if not batches:
            print(f"{paper.key}: nothing missing; `python -m lra_lab.reproduce {paper.key}` rewrites the report")
        _print_plan(batches, root)
        return 0
    rc = 0
    if batches:
        print(f"{paper.key}: {len(batches)} experiment(s) to run", flush=True)
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        free: queue.Queue[int | None] = queue.Queue()
        for i in range(args.jobs):  # one core per concurrent claim when there are enough (issue 36)
            free.put(cores[i] if args.jobs > 1 and len(cores) >= args.jobs else None)

        def pinned(batch: list[str]) -> int:
            core = free.get()
            try:
                return _run_batch(batch, root, core)
            finally:
                free.put(core)

        with CHILDREN.forwarding(), ThreadPoolExecutor(max_workers=args.jobs) as pool:
            rcs = list(pool.map(pinned, batches))
        if CHILDREN.signum is not None:
            print(f"interrupted by {signal.Signals(CHILDREN.signum).name}: {'; '.join(CHILDREN.interrupted) or 'nothing'} "
                  "saved what it had; rerun the same command to resume (finished runs are kept)",
                  file=sys.stderr, flush=True)
            return 128 + CHILDREN.signum
        rc = next((r for r in rcs if r), 0)
    try:  # each report, the index and each figure replaced atomically: a full disk leaves the old ones whole
        written = report.write(papers, root, [paper.key])
    except OSError as e:
        print(f"error: {describe(e)}", file=sys.stderr)
        return EXIT_STORAGE
    except InputError as e:  # a history that cannot tell the labels: the determined ones are kept
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INVALID
    for path in written:
        print(f"wrote {path.relative_to(root)}")
    for claim in claims:
        print(f"  {claim.id}: {claim.outcome(root).verdict}")
    return rc


def _main_closing_pipes() -> int:
    """``main``; a reader that closed the pipe early (``--list | head -1``) ends it quietly."""
    try:
        return main()
    except BrokenPipeError:
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 141


if __name__ == "__main__":
    raise SystemExit(_main_closing_pipes())
