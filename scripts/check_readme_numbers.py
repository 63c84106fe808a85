"""Check that every number README.md and docs/*.md tie to a record (an HTML comment ``rec PATH KEY [%]``
after it) equals that record, and that every verdict-count table equals the generated table of
reproductions (lra_lab/reproduce/doc_numbers.py says how the comments are written):

    python scripts/check_readme_numbers.py          # exit 1 and one line per mismatch
"""

from __future__ import annotations

import sys

from lra_lab.reproduce.doc_numbers import main

if __name__ == "__main__":
    sys.exit(main())
