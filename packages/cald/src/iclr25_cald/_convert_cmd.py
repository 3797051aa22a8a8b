"""``convert``: convert SmolLM2 (or ``--model``) to a linear-time mixer and report the weight accounting."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from iclr25_cald._experiment import _layer_distance, _load, _mamba_cfg, _wiki
from iclr25_shared.cli import Result, RunContext
from iclr25_shared.errors import InputError

if TYPE_CHECKING:
    from iclr25_cald.cli import ConvertConfig


def convert(cfg: ConvertConfig, ctx: RunContext) -> Result:
    """Convert SmolLM2 (or ``--model``) and report the weight accounting and the layerwise gap on real text."""
    import torch

    from iclr25_cald._convert import FAMILIES, save_converted
    from iclr25_cald._convert import convert as convert_model
    from iclr25_cald._task import prefix_model, tokenize

    wiki = _wiki(cfg.data)  # the data first: its problems never wait for the model
    lm = _load(cfg.model, ctx, layers=cfg.layers, families=tuple(sorted(FAMILIES)))
    layers = cfg.layers or int(lm.model.config.num_hidden_layers)
    if layers != lm.model.config.num_hidden_layers and lm.model.config.model_type != "llama":
        raise InputError(
            f"--layers: a layer prefix is built for Llama models only; --model {cfg.model!r} is "
            f"{lm.model.config.model_type!r} (use --layers 0)"
        )
    teacher = (
        prefix_model(lm.model, layers, task="lm") if layers != lm.model.config.num_hidden_layers else lm.model
    )
    t0 = time.perf_counter()
    conv = convert_model(
        teacher,
        cfg.mixer,
        k=cfg.k,
        max_seq_len=cfg.max_seq_len,
        seed=cfg.seed,
        mamba=_mamba_cfg(cfg),
        allow_bidirectional=cfg.allow_bidirectional,
    )
    wall = time.perf_counter() - t0
    student = conv.model
    t_state, s_state = teacher.state_dict(), student.state_dict()
    kept = [k for k in t_state if k in s_state]
    identical = sum(bool(torch.equal(t_state[k], s_state[k])) for k in kept)
    data = tokenize(lm.tokenizer, wiki.texts[:32], wiki.labels[:32], min(cfg.max_seq_len, 64))
    dist = _layer_distance(student, teacher, data, n=32)
    n_new = sum(s_state[k].numel() for k in conv.report.new_keys)
    n_removed = sum(t_state[k].numel() for k in conv.report.removed_keys)
    if ctx.writes:
        save_converted(student, ctx.path("model"))
    return Result(
        metrics={
            "family": conv.report.family,
            "mixer": conv.report.mixer,
            "layers_converted": conv.report.layers,
            "kept_tensors": len(kept),
            "kept_tensors_bit_identical": identical,
            "new_tensors": len(conv.report.new_keys),
            "new_parameters": n_new,
            "removed_tensors": len(conv.report.removed_keys),
            "removed_parameters": n_removed,
            "relative_layer_mse_before_fine_tuning": dist,
        },
        tables={"new_keys": [{"key": k} for k in conv.report.new_keys[:12]]},
        timings={"convert": wall},
        notes=[
            f"settings: {conv.report.settings}",
            "the converted model is saved under model/ (load with iclr25_cald.load_converted)"
            if ctx.writes
            else "pass --out to save the converted model",
        ],
        exit_code=0 if identical == len(kept) else 1,
    )
