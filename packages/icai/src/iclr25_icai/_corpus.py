"""The corpus ``run``, ``reproduce`` and ``bench`` draw their planted-rule pairs from (Wikipedia lead summaries)."""

from __future__ import annotations

from typing import Any


def _wiki() -> Any:
    from iclr25_shared.data import wiki_summaries

    return wiki_summaries()
