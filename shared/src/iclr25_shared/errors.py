"""Errors shared by every package, and the exit code each one means (docs/package-contract.md).

- :class:`InputError` — the user gave something that cannot work (a file that is missing, empty, corrupt or of the
  wrong kind; a value that does not fit the data): the CLI prints the one-line message and exits 2.
- :class:`SourceUnavailable` — a real input the project fetches (data set, packaged weights) is not there: exit 2,
  the message names the install command.
- anything else raised while a method runs (divergence, a library error on valid input) is a failure: exit 1.
"""

from __future__ import annotations

__all__ = ["DatasetUnavailable", "InputError", "ModelUnavailable", "SourceUnavailable"]


class InputError(ValueError):
    """Bad input from the user: the message names the file or field, the value, and what was expected.

    A ``ValueError`` subclass, so library callers that catch ``ValueError`` keep working; the CLI runner maps it to
    exit 2 wherever it is raised, while a plain ``ValueError`` raised during a run is a failure (exit 1).
    """


class SourceUnavailable(RuntimeError):
    """A real input (data set or pretrained weights) could not be found.

    The message always names what is missing and the exact command that installs it.
    """


class DatasetUnavailable(SourceUnavailable):
    """A data set's source is not installed and no path to it was given."""


class ModelUnavailable(SourceUnavailable):
    """Pretrained weights could not be found at the given path, in the cache, in a package or on the Hub."""
