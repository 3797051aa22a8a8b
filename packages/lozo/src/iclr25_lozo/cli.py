"""``iclr25-lozo``: fine-tune, reproduce and bench LOZO from the command line."""

from __future__ import annotations

from iclr25_lozo import __version__
from iclr25_lozo._experiment import BenchConfig, FinetuneConfig, ReproduceConfig, bench, finetune, reproduce
from iclr25_shared.cli import run

__all__ = ["main"]

DESCRIPTION = (
    "LOZO (ICLR 2025, arXiv 2410.07698): low-rank zeroth-order fine-tuning of language models with forward passes "
    "only. Default: SmolLM2-135M-Instruct fine-tuned on Wikipedia topic classification."
)


def main(argv: list[str] | None = None) -> int:
    """Console script ``iclr25-lozo``; returns the exit code."""
    return run(
        "iclr25-lozo",
        {
            "finetune": (FinetuneConfig, finetune),
            "reproduce": (ReproduceConfig, reproduce),
            "bench": (BenchConfig, bench),
        },
        argv,
        default="finetune",
        description=DESCRIPTION,
        version=__version__,
    )
