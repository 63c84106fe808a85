"""The suite's base error class, beneath every layer so that any module can raise it.

``InputError`` is what a user can fix: a config field, a family option, a command-line flag or
environment variable, the data, or the state of a workdir. The commands print it as one ``error:``
line and exit 2 (lra.training.run_errors.exit_code). A bare ``ValueError`` is not input: it is a
bug (a shape mismatch in a new family, a broken invariant) and keeps its traceback.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad input a user can fix; the message says what and how (exit 2, nothing changed)."""
