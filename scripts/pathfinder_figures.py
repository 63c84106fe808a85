"""Figures of the Pathfinder tasks (lra_lab/reports/pathfinder_figures.py): example images and a run's
learning curve; --help for every flag.

    python scripts/pathfinder_figures.py examples --out results/pathfinder/examples.png
    python scripts/pathfinder_figures.py curve --run results/runs/pathfinder_cpu/seed0 \
        --out results/pathfinder/curve_pathfinder_cpu.png
"""

from __future__ import annotations

import sys

from lra_lab.reports.pathfinder_figures import main

if __name__ == "__main__":
    sys.exit(main())
