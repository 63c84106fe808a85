"""``python -m lra.data prepare TASK [--data_dir DIR] [--max_len N]`` (lra/data/prepare.py) and
``python -m lra.data download TASK [--data_dir DIR] [--url URL]`` (lra/data/download.py)."""

import sys

from lra.data.prepare import main

if __name__ == "__main__":
    sys.exit(main())
