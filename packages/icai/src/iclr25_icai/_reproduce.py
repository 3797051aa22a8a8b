"""``reproduce``: the paper's synthetic experiment (arXiv:2406.06560, Section 4.1, Table 1) on real text, with the
primary comparison declared in the README."""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from iclr25_shared.cli import Result, RunContext

if TYPE_CHECKING:
    from iclr25_icai.cli import ReproduceConfig

from iclr25_icai._corpus import _wiki

__all__ = ["PAPER", "comparisons", "reproduce"]

PAPER = {  # arXiv:2406.06560, Table 1 (synthetic data, GPT-3.5-Turbo, mean over 6 seeds): default → constitutional
    "orthogonal": (37.8, 86.7),
    "aligned": (100.0, 92.2),
    "unaligned": (0.0, 84.4),
}


PRIMARY_SETTING = "orthogonal"
"""The primary comparison's setting: the planted rule (prefer the text about a person) is unrelated to what an LLM
judge prefers by default, so the default annotator is near chance and only a recovered rule can lift it."""


def paper_effect(setting: str) -> float:
    """Constitutional − default agreement in percentage points, Table 1 of arXiv:2406.06560 (GPT-3.5-Turbo)."""
    default, constitutional = PAPER[setting]
    return round(constitutional - default, 1)


def comparisons(per_seed: list[dict[str, Any]], backends: tuple[str, ...]) -> list[Any]:
    """Constitutional − default agreement (percentage points, paired by seed) for every (backend, setting) run.

    Primary: the orthogonal setting (or the first setting run) of SmolLM2 (``local``) when it ran, else of the
    oracle. Secondary (Holm-adjusted among themselves): the primary backend's other settings. Exploratory: the other
    backend's settings (the oracle is a scripted pipeline check, not a model).
    """
    from iclr25_shared.stats import compare

    ran = [b for b in ("local", "oracle") if b in backends and any(r["backend"] == b for r in per_seed)]
    if not ran:
        return []

    def pair(backend: str, setting: str) -> tuple[list[float], list[float]]:
        rows = sorted(
            (r for r in per_seed if (r["backend"], r["setting"]) == (backend, setting)),
            key=lambda r: r["seed"],
        )
        return [100 * r["agreement_constitutional"] for r in rows], [
            100 * r["agreement_default"] for r in rows
        ]

    def settings(backend: str) -> list[str]:
        return list(dict.fromkeys(r["setting"] for r in per_seed if r["backend"] == backend))

    def name(backend: str, setting: str) -> str:
        llm = "SmolLM2-135M" if backend == "local" else "oracle"
        return f"constitutional − default agreement (pp), {llm}, {setting}"

    main = ran[0]
    first = PRIMARY_SETTING if PRIMARY_SETTING in settings(main) else settings(main)[0]
    return compare(
        primary=(name(main, first), *pair(main, first)),
        secondary={name(main, s): pair(main, s) for s in settings(main) if s != first},
        exploratory={name(b, s): pair(b, s) for b in ran[1:] for s in settings(b)},
    )


def _sizes(backend: str, size: str) -> tuple[int, int]:
    if backend == "oracle" or size in ("full", "gpu"):
        return 30, 30
    return 4, 4


def _settings(backend: str, size: str, settings: tuple[str, ...]) -> list[str]:
    if backend == "oracle" or size in ("full", "gpu"):
        return list(settings)
    # quick SmolLM2: the orthogonal setting only (the primary comparison; one setting and seed takes minutes)
    return [s for s in settings if s == "orthogonal"] or list(settings)


def _icai_config(backend: str) -> Any:
    from iclr25_icai._icai import ICAIConfig

    if backend == "oracle":
        # the paper's settings (Appendix, synthetic configs): random flips, 3 reannotations; no position bias here
        return ICAIConfig(
            num_principles_per_pair=2, n_clusters=40, max_principles=5, reannotations=3, flips="random"
        )
    return ICAIConfig(
        num_principles_per_pair=1,
        n_clusters=3,
        max_principles=3,
        reannotations=2,
        merge="logprob",
        flips="balanced",
        vote_options=("A", "B"),
        prefill=True,
        proposal_max_tokens=20,
    )


def _one_run(
    cfg: ReproduceConfig,
    ctx: RunContext,
    backend_name: str,
    local: Any,
    embed: Any,
    icai_cfg: Any,
    seed: int,
    setting: str,
    pairs: tuple[Any, Any],
) -> dict[str, Any]:
    """ICAI on one seed's training pairs of one setting, then the reconstruction on its test pairs: the per-seed
    row (rule recovered, probe votes, agreement of the default, constitutional and true-rule annotators)."""
    from iclr25_icai._icai import reconstruct_many, run_icai
    from iclr25_icai._synthetic import RULES, SETTINGS, feature_oracle, matches_rule

    rule = SETTINGS[setting]
    train, test = pairs
    llm = feature_oracle([train, test], seed=seed) if backend_name == "oracle" else local
    t0 = time.perf_counter()
    probes = [RULES[rule].statement, RULES[rule].inverse]
    res = run_icai(train, llm, embed, icai_cfg, seed=seed, probes=probes)
    principles = list(res.constitution.principles)
    ranks = [i + 1 for i, p in enumerate(principles) if matches_rule(p, rule)]
    inv_rule = {"person": None, "longer": "shorter", "shorter": "longer"}[rule]
    probe = res.probe_counts.set_index("principle")
    rec = reconstruct_many(
        {"default": None, "constitution": res.constitution, "true": [RULES[rule].statement]},
        test,
        llm,
        seed=seed,
    )
    agree0, agree1, agree_true = (rec[k]["agree"].mean() for k in ("default", "constitution", "true"))
    return {
        "backend": backend_name,
        "setting": setting,
        "rule": rule,
        "seed": seed,
        "recovered_rank1": bool(ranks[:1] == [1]),
        "rank": ranks[0] if ranks else 0,
        "inverse_in_constitution": bool(
            inv_rule is not None and any(matches_rule(p, inv_rule) for p in principles)
        ),
        "proposed_at_all": bool(any(matches_rule(p, rule) for p in res.proposals["principle"] if p)),
        "probe_rule_net": int(probe.loc[probes[0], "for"] - probe.loc[probes[0], "against"]),
        "probe_inverse_net": int(probe.loc[probes[1], "for"] - probe.loc[probes[1], "against"]),
        "agreement_default": float(agree0),
        "agreement_constitutional": float(agree1),
        "agreement_true_rule": float(agree_true),
        "constitution": " | ".join(principles),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _backend_runs(
    cfg: ReproduceConfig, ctx: RunContext, backend_name: str, local: Any, corpus: Any, embed: Any
) -> list[dict[str, Any]]:
    """Every seed and setting of one backend: the per-seed rows, in run order."""
    from iclr25_icai._synthetic import SETTINGS, make_planted_pairs

    n_train, n_test = _sizes(backend_name, cfg.size)
    n_train, n_test = cfg.train_pairs or n_train, cfg.test_pairs or n_test
    icai_cfg = _icai_config(backend_name)
    rows: list[dict[str, Any]] = []
    n_seeds = 5 if cfg.size == "gpu" and cfg.seeds == 3 else cfg.seeds  # --size gpu: 5 unless given
    for s in range(n_seeds):
        seed = cfg.seed + s
        split = np.random.default_rng(10_000 + seed).permutation(len(corpus))
        train_rows, test_rows = split[: len(split) // 2], split[len(split) // 2 :]
        for setting in _settings(backend_name, cfg.size, cfg.settings):
            rule = SETTINGS[setting]
            train = make_planted_pairs(
                corpus, rule, n_train, seed=seed, max_words=cfg.max_words, rows=train_rows
            )
            test = make_planted_pairs(
                corpus, rule, n_test, seed=seed, max_words=cfg.max_words, rows=test_rows
            )
            ctx.log.info(f"{backend_name} seed {seed} {setting}: {n_train} train / {n_test} test pairs")
            rows.append(
                _one_run(cfg, ctx, backend_name, local, embed, icai_cfg, seed, setting, (train, test))
            )
            ctx.log.info(f"row: {rows[-1]}")  # a record even if the run is stopped later
    return rows


def _summary(cfg: ReproduceConfig, per_seed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (backend, setting): how often the rule was recovered and the mean agreements."""
    from iclr25_icai._synthetic import RULES, SETTINGS

    summary = []
    for backend_name in cfg.backends:
        for setting in _settings(backend_name, cfg.size, cfg.settings):
            rows = [r for r in per_seed if r["backend"] == backend_name and r["setting"] == setting]
            summary.append(
                {
                    "backend": backend_name,
                    "setting": setting,
                    "planted rule": RULES[SETTINGS[setting]].statement.removeprefix(
                        "Select the response that "
                    ),
                    "seeds": len(rows),
                    "recovered (rank 1)": f"{sum(r['recovered_rank1'] for r in rows)}/{len(rows)}",
                    "in constitution": f"{sum(r['rank'] > 0 for r in rows)}/{len(rows)}",
                    "inverse rule in constitution": f"{sum(r['inverse_in_constitution'] for r in rows)}/{len(rows)}",
                    "default %": round(100 * statistics.mean(r["agreement_default"] for r in rows), 1),
                    "constitutional %": round(
                        100 * statistics.mean(r["agreement_constitutional"] for r in rows), 1
                    ),
                    "true-rule constitution %": round(
                        100 * statistics.mean(r["agreement_true_rule"] for r in rows), 1
                    ),
                    "paper default → const. %": "{} → {}".format(*PAPER[setting]),
                }
            )
    return summary


def _metrics_and_notes(
    cfg: ReproduceConfig, per_seed: list[dict[str, Any]], rows_c: list[Any]
) -> tuple[dict[str, Any], list[str]]:
    """The metrics (size, seeds, paper effect and verdict of the primary) and the notes."""
    notes = [
        "oracle = a scripted LLM that reads the prompts and answers from the true text features (a pipeline check, "
        "not a model); local = SmolLM2-135M-Instruct, scoring A vs B by next-token log-probability.",
        "default and constitutional annotators: same model, same test pairs, both orders of every pair (equal calls).",
        "probe_*_net: for - against votes of the planted rule and of its inverse on the training pairs (the voter's "
        "ability to see the rule, independent of the proposer).",
    ]
    metrics: dict[str, Any] = {
        "size": cfg.size,
        "seeds": len({r["seed"] for r in per_seed}) if per_seed else cfg.seeds,
    }
    if rows_c:
        from iclr25_shared.stats import verdict

        setting = rows_c[0].name.rsplit(", ", 1)[1]
        metrics["paper_effect"] = paper_effect(setting)
        metrics["verdict"] = verdict(rows_c[0], metrics["paper_effect"])
        notes.append(
            "comparisons (iclr25_shared.stats.compare): constitutional − default agreement on the held-out pairs in "
            f"percentage points, paired by seed, Student-t 95 %. Primary (declared before the run): {rows_c[0].name}; "
            f"paper_effect = Table 1's GPT-3.5-Turbo gain in that setting ({metrics['paper_effect']:+g} pts). "
            "Secondary: the primary LLM's other settings (Holm-adjusted); exploratory: the oracle's (a scripted "
            "pipeline check) when SmolLM2 is the primary."
        )
    return metrics, notes


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """Planted-rule recovery and reconstruction agreement (arXiv:2406.06560, Section 4.1, Table 1) on Wikipedia."""
    from iclr25_icai._backends import CachedBackend, LocalChatBackend
    from iclr25_icai._embed import TfidfEmbedder

    corpus = _wiki()
    embed = TfidfEmbedder()
    per_seed: list[dict[str, Any]] = []
    timings: dict[str, float] = {}
    local = None
    for backend_name in cfg.backends:
        t_backend = time.perf_counter()
        if backend_name == "local" and local is None:
            ctx.log.info("loading SmolLM2-135M-Instruct")
            local = CachedBackend(LocalChatBackend(device=ctx.torch_device(), seed=cfg.seed), None)
        per_seed.extend(_backend_runs(cfg, ctx, backend_name, local, corpus, embed))
        timings[backend_name] = time.perf_counter() - t_backend
    summary = _summary(cfg, per_seed)
    rows_c = comparisons(per_seed, cfg.backends)
    metrics, notes = _metrics_and_notes(cfg, per_seed, rows_c)
    return Result(
        metrics=metrics,
        tables={"comparisons": [r.as_dict() for r in rows_c], "summary": summary, "per_seed": per_seed},
        timings=timings,
        notes=notes,
    )
