"""Compare ``:reference`` Luna/ConvLuna with the authors' published PyTorch code, number for number.

    ENV/bin/python scripts/check_published_code.py --authors-repo PATH [--out results/reference/published_code]

PATH: a checkout of github.com/vladyorsh/lra_efficient_transformers (the paper's runs: ede87b9).
ENV: an environment with torch and einops besides lra (torch is not a dependency of lra), e.g.
``python -m venv --system-site-packages ENV && ENV/bin/pip install torch einops``.
Prints, per config, max |logit difference|, max |gradient difference| (absolute and relative to
the largest gradient of that parameter) and parameter counts; exits 1 if the logits differ by
more than --tolerance, a relative gradient difference exceeds --grad-tolerance, or the counts differ. See
lra_lab/reference/published_code.py.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--authors-repo", type=Path, required=True, help="checkout of vladyorsh/lra_efficient_transformers"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="write OUT.json and OUT.md (e.g. results/reference/published_code)"
    )
    parser.add_argument("--tolerance", type=float, default=1e-5, help="max |logit difference|")
    parser.add_argument(
        "--grad-tolerance",
        type=float,
        default=2e-3,
        help="max |gradient difference| / max |their gradient|, per parameter",
    )
    parser.add_argument(
        "--ablations",
        action="store_true",
        help="also set each :reference switch back to lra's default, one at a time (ListOps)",
    )
    args = parser.parse_args(argv)
    try:
        import einops  # noqa: F401  (their layers import it)
        import torch  # noqa: F401
    except ImportError as e:
        print(
            f"error: {e.name} is not installed in this environment; the check runs their PyTorch code: "
            f"python -m venv --system-site-packages ENV && ENV/bin/pip install torch einops",
            file=sys.stderr,
        )
        return 2
    from lra_lab.reference.published_code import run

    try:
        command = "python scripts/check_published_code.py " + shlex.join(argv if argv is not None else sys.argv[1:])
        return run(args.authors_repo, args.out, args.tolerance, args.grad_tolerance, command, args.ablations)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
