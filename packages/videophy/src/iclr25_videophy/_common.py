"""What the commands share: the paper's leaderboard, the default prompts, the packaged example labels and the
rounding of table rows (``generate``, ``evaluate``, ``leaderboard``, ``reproduce`` and ``bench`` each live in their
own module)."""

from __future__ import annotations

import math
from importlib.resources import files
from pathlib import Path
from typing import Any

# Table 2 of the paper / the authors' README leaderboard (human evaluation, %): joint, SA, PC.
PAPER_LEADERBOARD = {
    "CogVideoX-5B": (39.6, 63.3, 53.0),
    "Pika": (19.7, 41.1, 36.5),
    "VideoCrafter2": (19.0, 48.5, 34.6),
    "CogVideoX-2B": (18.6, 47.2, 34.1),
    "LaVIE": (15.7, 48.7, 28.0),
    "Luma Dream Machine": (13.6, 61.9, 21.8),
    "Lumiere-T2I2V": (12.5, 48.5, 25.0),
    "SVD-T2I2V": (11.9, 42.4, 30.8),
    "ZeroScope": (11.9, 30.2, 32.6),
    "Lumiere-T2V": (9.0, 38.4, 27.9),
    "Gen-2": (7.6, 26.6, 27.2),
    "OpenSora": (4.9, 18.0, 23.5),
}

DEFAULT_PROMPTS = (
    "An apple falls and bounces on the hard ground.",
    "Water pours from a glass jug into a cup, filling it to the brim.",
    'A rubber ball, "slightly deflated", rolls down a ramp; it stops at the bottom.',
)


def _example_labels() -> Path:
    return Path(str(files("iclr25_videophy") / "data" / "videophy_train_example.csv"))


def _round(rows: list[dict[str, Any]], nd: int = 1) -> list[dict[str, Any]]:
    return [
        {k: (round(v, nd) if isinstance(v, float) and not math.isnan(v) else v) for k, v in r.items()}
        for r in rows
    ]
