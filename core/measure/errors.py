"""The one error of this package: bad input a user must fix (the CLI prints it and exits 2)."""

from __future__ import annotations


class MeasureInputError(Exception):
    """A workload option, a dataset file or the target refuses to be measured; the text says what to change."""
