"""Reproductions: each paper's claims, tested at a scale a 2-core laptop runs, with a verdict.

``python -m lra_lab.reproduce PAPER`` runs what a paper's claims still miss and writes
``results/reproductions/<paper>/report.md``; ``--list`` shows every claim and its verdict.

Reading order:

1. ``registry``: a ``Claim`` (the paper's statement and numbers, the laptop experiment, the verdict
   rule fixed before the runs) and a ``Paper``; ``PAPERS`` maps a paper's key to its claims.
2. ``evidence``: reading committed records (run results, benchmark JSON) and the statistics the
   rules use (paired one-sided tests, mean +- std).
3. One module per paper, each declaring its claims: ``convluna``, ``clustered``,
   ``agglomerative``, ``dispersed``, ``cheap_linear`` (the last three also hold the small
   measurements their claims need, run as ``python -m lra_lab.reproduce.<module>``).
4. ``report``: the per-paper ``report.md`` and the verdict table over all papers.
5. ``__main__``: the command line (run what is missing, then report).
6. Beside them: ``replication`` (registered judges on a replication's records,
   ``python -m lra_lab.reproduce.replication``) and ``doc_numbers`` (README's and docs' numbers against the
   records they cite and the verdict table; scripts/check_readme_numbers.py), moved here from
   ``lra.reports`` (issue 55: they read the claims, so they sit above them, not in the library).

Verdicts are computed by code from records committed under ``results/``; none is written by hand.
A claim whose records are incomplete says which runs are missing instead of a verdict.
"""
