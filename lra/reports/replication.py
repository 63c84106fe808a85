"""The old entry point ``python -m lra.reports.replication`` (the committed replication records name it).

The module moved to :mod:`lra.reproduce.replication` (issue 55: it judges registered claims, so it sits
in the laboratory, above the claims; ``lra.reports`` is the library's and imports none of it).
"""

import sys

if __name__ == "__main__":
    from lra.reproduce.replication import main

    sys.exit(main())
