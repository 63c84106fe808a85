"""``python -m lra.data prepare|download TASK ...`` (lra/data/prepare.py, lra/data/download.py)."""

import sys

from lra.data.prepare import main

if __name__ == "__main__":
    sys.exit(main())
