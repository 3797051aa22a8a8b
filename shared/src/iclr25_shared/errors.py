"""Errors shared by every package."""

from __future__ import annotations

__all__ = ["DatasetUnavailable", "ModelUnavailable", "SourceUnavailable"]


class SourceUnavailable(RuntimeError):
    """A real input (data set or pretrained weights) could not be found.

    The message always names what is missing and the exact command that installs it.
    """


class DatasetUnavailable(SourceUnavailable):
    """A data set's source is not installed and no path to it was given."""


class ModelUnavailable(SourceUnavailable):
    """Pretrained weights could not be found at the given path, in the cache, in a package or on the Hub."""
