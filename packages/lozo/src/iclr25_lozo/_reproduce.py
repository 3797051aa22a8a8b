"""``reproduce``: MeZO vs LOZO vs LOZO-M vs first-order Adam at equal forward-pass budgets, each tuned on the
tuning seed, then every seed at the chosen setting; comparisons through ``iclr25_shared.stats``.

Primary (README "Primary comparison"): LM test accuracy, LOZO - MeZO, paired by seed (same k-shot split, same
initial weights, 2 x lm_steps forward passes each), read against +0.02 (a declared smallest effect of interest of
the size of the paper's k = 16 gains; not a number checked against the paper). Secondary (Holm-adjusted among
themselves): LOZO-M against MeZO and LOZO, and the train-loss differences. Exploratory: Adam and zero-shot
contrasts, and the digits MLP.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch
from torch import nn

from iclr25_lozo._data import require_task_data
from iclr25_lozo._experiment import (
    _label_task,
    _load_data,
    _load_lm,
    _plot_losses,
    make_optimizer,
    train_steps,
)
from iclr25_lozo._task import (
    Batch,
    LabelWordTask,
    kshot_split,
)
from iclr25_lozo.cli import ReproduceConfig
from iclr25_shared.cli import Result, RunContext
from iclr25_shared.inputs import validating
from iclr25_shared.results import markdown_table

__all__ = ["PAPER_EFFECT", "comparisons", "per_seed_rows", "reproduce"]

PAPER_EFFECT = 0.02
"""The effect the primary's verdict reads against: LOZO - MeZO test accuracy = +0.02 (2 points). The paper
(Chen et al., ICLR 2025, Section 5 tables) reports LOZO ahead of MeZO at equal steps on RoBERTa-large k = 16 and
OPT tasks; its per-task numbers could not be checked against the PDF offline, so this is a declared smallest effect
of interest of that order, not the paper's number."""
NAMES = {"mezo": "MeZO", "lozo": "LOZO", "lozo-m": "LOZO-M", "adam": "Adam", "zero-shot": "zero-shot"}


def _finite(value: Any) -> Any:
    """``None`` for a non-finite float (JSON null), the value otherwise."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _clean(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows for results.json: the loss curve dropped, non-finite numbers null with a note naming them."""
    out = []
    for r in rows:
        row = {k: _finite(v) for k, v in r.items() if k != "curve"}
        bad = [k for k, v in r.items() if k != "curve" and isinstance(v, float) and not math.isfinite(v)]
        row["note"] = f"non-finite (diverged): {', '.join(bad)}" if bad else ""
        out.append(row)
    return out


def per_seed_rows(
    part: str,
    rows: list[dict[str, Any]],
    chosen: dict[str, dict[str, Any]],
    keys: list[str],
    zero_shot: dict[int, dict[str, float]] | None = None,
) -> list[dict[str, Any]]:
    """One row per seed x method at each method's chosen setting (and zero-shot per seed), with the raw values the
    comparisons are computed from."""
    out = []
    if zero_shot is not None:
        for seed, z in sorted(zero_shot.items()):
            out.append({"part": part, "seed": seed, "method": "zero-shot", "lr": None, "beta": None, **z})
    for method in chosen:
        for r in _at_chosen(rows, chosen, method):
            out.append(
                {
                    "part": part,
                    "seed": r["seed"],
                    "method": method,
                    "lr": r["lr"],
                    "beta": r["beta"] if method == "lozo-m" else None,
                    "forward_passes": r["forward_passes"],
                    **{k: r[k] for k in keys},
                }
            )
    return _clean(out)


def comparisons(per_seed: list[dict[str, Any]]) -> tuple[list[Any], list[str]]:
    """The comparisons (``iclr25_shared.stats.compare`` rows, primary first) and notes on left-out seeds.

    Differences are ``a - b`` of one per-seed value over the seeds both have (test accuracy: higher is better;
    train loss: lower is better). The primary is LM test accuracy LOZO - MeZO; when a run lacks it (other
    --methods, --skip-lm), the first available candidate of the same list takes its place and a note says so.
    """
    from iclr25_shared.stats import compare

    notes: list[str] = []
    values: dict[tuple[str, str, str], dict[int, Any]] = {}
    for r in per_seed:
        for key in ("test_accuracy", "train_loss"):
            if key in r:
                values.setdefault((r["part"], r["method"], key), {})[r["seed"]] = r[key]

    def pair(part: str, a: str, b: str, key: str) -> tuple[list[float], list[float]] | None:
        va, vb = values.get((part, a, key)), values.get((part, b, key))
        if not va or not vb:
            return None
        seeds = sorted(set(va) & set(vb))
        keep = [s for s in seeds if va[s] is not None and vb[s] is not None]
        if len(keep) < len(seeds):
            notes.append(
                f"{part} {key} {a} - {b}: seeds {sorted(set(seeds) - set(keep))} left out (a non-finite value, "
                "null in per_seed)"
            )
        return ([float(va[s]) for s in keep], [float(vb[s]) for s in keep]) if keep else None

    what = {"test_accuracy": "test accuracy", "train_loss": "train loss"}

    def name(part: str, a: str, b: str, key: str) -> str:
        return f"{part} {what[key]}: {NAMES[a]} - {NAMES[b]}"

    primary_candidates = [
        ("LM", "lozo", "mezo", "test_accuracy"),
        ("digits", "lozo", "mezo", "test_accuracy"),
    ]
    secondary_spec = [
        ("LM", "lozo-m", "mezo", "test_accuracy"),
        ("LM", "lozo-m", "lozo", "test_accuracy"),
        ("LM", "lozo", "mezo", "train_loss"),
        ("LM", "lozo-m", "mezo", "train_loss"),
    ]
    exploratory_spec = [
        ("LM", "adam", "mezo", "test_accuracy"),
        ("LM", "adam", "lozo", "test_accuracy"),
        ("LM", "adam", "mezo", "train_loss"),
        *[("LM", m, "zero-shot", "test_accuracy") for m in ("mezo", "lozo", "lozo-m", "adam")],
        *[("LM", m, "zero-shot", "train_loss") for m in ("mezo", "lozo", "lozo-m")],
        *[
            ("digits", a, b, key)
            for key in ("train_loss", "test_accuracy")
            for a, b in (("lozo", "mezo"), ("lozo-m", "mezo"), ("lozo-m", "lozo"), ("adam", "lozo"))
        ],
    ]
    primary = None
    for spec in primary_candidates + secondary_spec + exploratory_spec:
        p = pair(*spec)
        if p is not None:
            primary = (name(*spec), *p)
            break
    if primary is None:
        raise ValueError("reproduce needs two methods with common seeds to compare")
    if primary[0] != name(*primary_candidates[0]):
        notes.append(
            f"THIS RUN'S PRIMARY IS NOT THE DECLARED ONE (LM test accuracy LOZO - MeZO): {primary[0]}"
        )

    def group(specs: list[tuple[str, str, str, str]]) -> dict[str, tuple[list[float], list[float]]]:
        out = {}
        for spec in specs:
            if name(*spec) == primary[0]:
                continue
            p = pair(*spec)
            if p is not None:
                out[name(*spec)] = p
        return out

    rows = compare(primary=primary, secondary=group(secondary_spec), exploratory=group(exploratory_spec))
    return rows, notes


def _digits_split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    from iclr25_shared.data import digits

    images, labels = digits()
    x = torch.as_tensor(images.reshape(len(images), -1))
    y = torch.as_tensor(labels)
    perm = np.random.default_rng(1234).permutation(len(x))  # one fixed split for every run
    train, test = perm[:1500], perm[1500:]
    return x[train], y[train], x[test], y[test]


def _reproduce_optimizer(
    cfg: ReproduceConfig, method: str, model: nn.Module, lr: float, beta: float, seed: int
) -> Any:
    return make_optimizer(
        method,
        model,
        lr=lr,
        eps=cfg.eps,
        rank=cfg.rank,
        interval=cfg.interval,
        momentum=beta,
        weight_decay=0.0,
        seed=seed,
    )


def _adam_steps(zo_steps: int) -> int:
    """Adam's steps at the forward-pass budget of ``zo_steps`` zeroth-order steps (2 vs 3 forward-equivalents)."""
    return max(1, (2 * zo_steps) // 3)


def _digits_run(cfg: ReproduceConfig, method: str, lr: float, beta: float, seed: int) -> dict[str, Any]:
    x_train, y_train, x_test, y_test = _digits_split()  # the seed varies init, batches and directions
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = _reproduce_optimizer(cfg, method, model, lr, beta, seed)
    steps = cfg.digits_steps if method != "adam" else _adam_steps(cfg.digits_steps)
    rng = np.random.default_rng(seed)
    loss_fn = nn.CrossEntropyLoss()

    def draw() -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(rng.choice(len(x_train), 128, replace=False))
        return x_train[idx], y_train[idx]

    run = train_steps(
        model, optimizer, lambda b: loss_fn(model(b[0]), b[1]), draw, steps, quiet=True, desc=""
    )
    with torch.no_grad():
        train_loss = float(loss_fn(model(x_train), y_train))
        test_acc = float((model(x_test).argmax(1) == y_test).float().mean())
    return {
        "method": method,
        "lr": lr,
        "beta": beta,
        "seed": seed,
        "steps": steps,
        "forward_passes": run["forward_passes"],
        # no validation split here: the grid is chosen on the final full-train loss of the tuning seed
        "select": train_loss if math.isfinite(train_loss) else float("inf"),
        "train_loss": train_loss if math.isfinite(train_loss) else float("inf"),
        "test_accuracy": test_acc,
        "curve": run["losses"],
    }


def _lm_run(
    cfg: ReproduceConfig, method: str, lr: float, beta: float, seed: int, shared: dict[str, Any]
) -> dict[str, Any]:
    """One fine-tuning run from the initial weights on seed ``seed``'s k-shot split; weights restored after."""
    model, task = shared["model"], shared["task"]
    train, val, test = shared["splits"][seed]
    initial = shared["initial"]
    try:
        optimizer = _reproduce_optimizer(cfg, method, model, lr, beta, seed)
        steps = cfg.lm_steps if method != "adam" else _adam_steps(cfg.lm_steps)
        rng = np.random.default_rng([seed, 2])
        size = min(cfg.batch_size, len(train))

        def draw() -> Batch:
            return LabelWordTask.select(train, rng.choice(len(train), size, replace=False))

        model.train(False)
        run = train_steps(
            model,
            optimizer,
            lambda b: task.loss(model, b),
            draw,
            steps,
            quiet=cfg.quiet,
            desc=f"{method} lr={lr:g}" + (f" beta={beta:g}" if method == "lozo-m" else "") + f" seed={seed}",
        )
        scores = _scores(task, model, {"train": train, "val": val, "test": test})
    finally:
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(initial[name])
                p.grad = None
    val_loss = scores["val"]["loss"]
    return {
        "method": method,
        "lr": lr,
        "beta": beta,
        "seed": seed,
        "steps": steps,
        "forward_passes": run["forward_passes"],
        "seconds": run["seconds"],
        "skipped_steps": run["skipped_steps"],
        "select": val_loss if math.isfinite(val_loss) else float("inf"),
        "train_loss": scores["train"]["loss"],
        "val_loss": val_loss,
        "val_accuracy": scores["val"]["accuracy"],
        "test_loss": scores["test"]["loss"],
        "test_accuracy": scores["test"]["accuracy"],
        "curve": run["losses"],
    }


def _scores(task: LabelWordTask, model: nn.Module, sets: dict[str, Batch]) -> dict[str, dict[str, float]]:
    """Mean cross-entropy and accuracy of ``model`` on each labelled set."""
    out = {}
    for name, batch in sets.items():
        logits = task.scores(model, batch, batch_size=32)
        labels = batch.labels.cpu()
        out[name] = {
            "loss": float(torch.nn.functional.cross_entropy(logits, labels)),
            "accuracy": float((logits.argmax(1) == labels).float().mean()),
        }
    return out


def _tune_then_seeds(
    cfg: ReproduceConfig, run_one: Any, seeds: list[int], log: Any, label: str
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Each method's grid on the tuning seed ``seeds[0]``, the setting with the lowest ``select`` chosen, then the
    other seeds at it. Returns every run and the chosen (lr, beta) per method."""
    rows: list[dict[str, Any]] = []
    chosen: dict[str, dict[str, Any]] = {}
    for method in cfg.methods:
        grid_rows = []
        for lr, beta in cfg.lr_grid(method):
            r = run_one(method, lr, beta, seeds[0])
            r["phase"] = "grid"
            grid_rows.append(r)
            log(f"  {label} grid {_run_line(r)}")
        best = min(grid_rows, key=lambda r: r["select"])
        chosen[method] = {"lr": best["lr"], "beta": best["beta"]}
        rows += grid_rows
        for seed in seeds[1:]:
            r = run_one(method, best["lr"], best["beta"], seed)
            r["phase"] = "seeds"
            rows.append(r)
            log(f"  {label} seed {_run_line(r)}")
    return rows, chosen


def _run_line(r: dict[str, Any]) -> str:
    """One log line per run with every number the tables use (so a log alone is enough to rebuild them)."""
    text = f"{r['method']:7s} lr={r['lr']:g}" + (f" beta={r['beta']:g}" if r["method"] == "lozo-m" else "")
    text += f" seed={r['seed']}: select {r['select']:.4f}, train loss {r['train_loss']:.4f}"
    if "val_loss" in r:
        text += f", val loss {r['val_loss']:.4f} acc {r['val_accuracy']:.3f}, test loss {r['test_loss']:.4f}"
    text += f", test acc {r['test_accuracy']:.4f}"
    if "seconds" in r:
        text += f", {r['seconds'] / r['steps']:.2f} s/step"
    return text


def _at_chosen(
    rows: list[dict[str, Any]], chosen: dict[str, dict[str, Any]], method: str
) -> list[dict[str, Any]]:
    c = chosen[method]
    out = [r for r in rows if r["method"] == method and r["lr"] == c["lr"] and r["beta"] == c["beta"]]
    return sorted(out, key=lambda r: r["seed"])


def _summary(
    rows: list[dict[str, Any]], chosen: dict[str, dict[str, Any]], keys: list[str]
) -> list[dict[str, Any]]:
    table = []
    for method, c in chosen.items():
        rs = _at_chosen(rows, chosen, method)
        entry: dict[str, Any] = {
            "method": method,
            "lr": c["lr"],
            "beta": c["beta"] if method == "lozo-m" else None,
        }
        entry["seeds"] = len(rs)
        entry["forward_passes"] = rs[0]["forward_passes"]
        for k in keys:
            vals = np.array([r[k] for r in rs], dtype=float)
            entry[k] = float(vals.mean())
            entry[f"{k}_sd"] = float(vals.std(ddof=1)) if len(vals) > 1 else float("nan")
        table.append(entry)
    return table


def reproduce(cfg: ReproduceConfig, ctx: RunContext) -> Result:
    """Run the ``reproduce`` subcommand; see :class:`~iclr25_lozo.cli.ReproduceConfig`."""
    cfg = cfg.resolved()  # the --size preset
    if not cfg.skip_lm:
        require_task_data(cfg.lm_task, cfg.data_path)  # the sentiment source, before any model loads
    device = ctx.torch_device()
    log = ctx.log.info
    seeds = list(range(cfg.seed, cfg.seed + cfg.seeds))
    tables: dict[str, Any] = {}
    metrics: dict[str, Any] = {}
    figures: dict[str, dict[str, list[float]]] = {}
    per_seed: list[dict[str, Any]] = []

    if not cfg.skip_lm:
        start = time.perf_counter()
        data = _load_data(cfg.lm_task, cfg.data_path, cfg.neutral_margin)
        with validating(
            "--shots/--val-per-class/--test-per-class"
        ):  # must fit the data; before the model loads
            index = {
                seed: kshot_split(
                    data.labels,
                    shots=cfg.shots,
                    val_per_class=cfg.val_per_class,
                    test_per_class=cfg.test_per_class,
                    seed=seed,
                )
                for seed in seeds
            }
        lm = _load_lm(cfg.model, cfg.lm_task, data, device, "float32", cfg.seed)
        model = lm.model.eval()
        task = _label_task(cfg.lm_task, lm.tokenizer, data.classes, cfg.max_text_tokens)
        splits, zero_shot = {}, {}
        for seed in seeds:
            splits[seed] = tuple(task.encode(data.subset(i)).to(device) for i in index[seed])
            zero_shot[seed] = _scores(
                task, model, dict(zip(("train", "val", "test"), splits[seed], strict=True))
            )
        initial = {name: p.detach().clone() for name, p in model.named_parameters()}
        shared = {"model": model, "task": task, "splits": splits, "initial": initial}
        prompt_tokens = float(
            np.mean([float(s[0].attention_mask.sum(1).float().mean()) for s in splits.values()])
        )
        log(
            f"B. {cfg.model} on {cfg.lm_task} ({len(data)} texts, {len(data.classes)} classes): k = {cfg.shots} "
            f"per class, {cfg.val_per_class} validation and {cfg.test_per_class} test examples per class per seed; "
            f"{cfg.lm_steps} zeroth-order steps ({2 * cfg.lm_steps} forward passes; Adam "
            f"{_adam_steps(cfg.lm_steps)} steps), batch {cfg.batch_size}, mean prompt {prompt_tokens:.1f} tokens; "
            f"grid on seed {seeds[0]} by validation loss, then seeds {seeds}"
        )
        for seed in seeds:
            z = zero_shot[seed]
            log(
                f"  zero-shot seed={seed}: test accuracy {z['test']['accuracy']:.3f}, val loss "
                f"{z['val']['loss']:.4f}, train loss {z['train']['loss']:.4f}"
            )
        rows, chosen = _tune_then_seeds(
            cfg, lambda m, lr, b, s: _lm_run(cfg, m, lr, b, s, shared), seeds, log, "LM"
        )
        summary = _summary(rows, chosen, ["test_accuracy", "test_loss", "train_loss", "val_loss"])
        zs_row: dict[str, Any] = {"method": "zero-shot", "lr": None, "beta": None, "seeds": len(seeds)}
        zs_row["forward_passes"] = 0
        for k, part, field in (
            ("test_accuracy", "test", "accuracy"),
            ("test_loss", "test", "loss"),
            ("train_loss", "train", "loss"),
            ("val_loss", "val", "loss"),
        ):
            vals = np.array([zero_shot[s][part][field] for s in seeds])
            zs_row[k] = float(vals.mean())
            zs_row[f"{k}_sd"] = float(vals.std(ddof=1)) if len(vals) > 1 else float("nan")
        summary.insert(0, zs_row)
        zs = {s: {"test_accuracy": zero_shot[s]["test"]["accuracy"], "test_loss": zero_shot[s]["test"]["loss"],
                  "train_loss": zero_shot[s]["train"]["loss"], "val_loss": zero_shot[s]["val"]["loss"]}
              for s in seeds}  # fmt: skip
        per_seed += per_seed_rows(
            "LM", rows, chosen, ["test_accuracy", "test_loss", "train_loss", "val_loss"], zero_shot=zs
        )
        speed = {
            m: float(np.mean([r["seconds"] / r["steps"] for r in rows if r["method"] == m]))
            for m in cfg.methods
        }
        log("  seconds per step: " + ", ".join(f"{m} {v:.2f}" for m, v in speed.items()))
        tables["B. LM, chosen setting per method (mean and sd over seeds)"] = summary
        tables["B. LM, every run"] = _clean(rows)
        metrics["lm_seconds_per_step"] = speed
        metrics["lm_wall_seconds"] = time.perf_counter() - start
        metrics["lm_zero_shot"] = zero_shot
        figures["lm_loss.png"] = {m: _at_chosen(rows, chosen, m)[0]["curve"] for m in chosen}

    if cfg.digits:
        log(
            f"A. digits MLP 64-128-10, {cfg.digits_steps} zeroth-order steps (Adam: same forward-pass budget)"
        )
        rows_a, chosen_a = _tune_then_seeds(
            cfg, lambda m, lr, b, s: _digits_run(cfg, m, lr, b, s), seeds, log, "digits"
        )
        summary_a = _summary(rows_a, chosen_a, ["train_loss", "test_accuracy"])
        per_seed += per_seed_rows("digits", rows_a, chosen_a, ["train_loss", "test_accuracy"])
        log(
            markdown_table(
                summary_a, ["method", "lr", "beta", "train_loss", "train_loss_sd", "test_accuracy"]
            )
        )
        tables["A. digits MLP, chosen setting per method"] = summary_a
        tables["A. digits MLP, every run"] = _clean(rows_a)
        figures["digits_loss.png"] = {m: _at_chosen(rows_a, chosen_a, m)[0]["curve"] for m in chosen_a}

    if ctx.writes:
        for name, curves in figures.items():
            _plot_losses(
                curves, ctx.path(name), name.split("_")[0] + ": training loss, chosen setting, seed 0"
            )
    from iclr25_shared.stats import verdict

    compared, left_out = comparisons(per_seed)
    metrics["primary"] = compared[0].name
    metrics["paper_effect"] = PAPER_EFFECT
    metrics["paper_effect_source"] = (
        "declared smallest effect of interest (+2 points of test accuracy, LOZO over MeZO), of the order of the "
        "paper's k = 16 gains (Chen et al., ICLR 2025, Section 5 tables); the per-task numbers were not checked "
        "against the PDF offline"
    )
    metrics["verdict"] = verdict(compared[0], PAPER_EFFECT)
    log(f"primary: {compared[0].name}: {compared[0].estimate}; verdict: {metrics['verdict']}")
    tables = {"comparisons": [c.as_dict() for c in compared], "per_seed": per_seed, **tables}
    return Result(
        metrics=metrics,
        tables=tables,
        notes=[
            "primary (declared before the run): LM test accuracy, LOZO - MeZO, paired by seed (same k-shot split, "
            "same initial weights, equal forward passes), each method at the setting chosen on the tuning seed's "
            f"validation loss; verdict against {PAPER_EFFECT:+.2f} (a declared smallest effect of interest). "
            "Secondary (Holm-adjusted among themselves): LM test accuracy LOZO-M - MeZO and LOZO-M - LOZO, LM train "
            "loss LOZO - MeZO and LOZO-M - MeZO. Exploratory: Adam and zero-shot contrasts, the digits MLP.",
            "Equal forward-pass budgets: a zeroth-order step costs 2 forward passes, a first-order Adam step "
            "3 forward-equivalents (forward + backward), so Adam gets 2/3 as many steps.",
            f"Each method's setting is chosen on the tuning seed {seeds[0]} (LM: validation loss; digits: final "
            "train loss); that seed's run is reused as the first of the reported seeds.",
            *left_out,
        ],
    )
