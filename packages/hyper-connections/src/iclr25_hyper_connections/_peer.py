"""The peer implementation, ``hyper-connections`` on PyPI (lucidrains), wired into the same Hugging Face decoder.

Used only to compare against it (numerical agreement, step time, activation memory); nothing in the package
depends on it. Install with ``pip install hyper-connections`` (tested with 0.4.11).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from iclr25_hyper_connections._hf import HyperConnectedDecoderLayer, _decoder_layers
from iclr25_hyper_connections._hyper_connection import HyperConnection

__all__ = ["PeerDecoderLayer", "apply_peer_hyper_connections", "copy_connection_weights", "peer_version"]


def peer_version() -> str:
    """The installed ``hyper-connections`` version; ``ImportError`` naming the install command when missing."""
    try:
        from importlib.metadata import version

        import hyper_connections  # noqa: F401
    except ImportError:
        raise ImportError("the peer package is missing: pip install hyper-connections") from None
    return version("hyper-connections")


class PeerDecoderLayer(nn.Module):
    """A pre-norm decoder layer whose residual connections are the peer's ``HyperConnections`` modules.

    The peer keeps the streams in the batch axis, ``(batch·n, seq, dim)`` with the stream index fastest; its
    branch input is ``(batch, seq, dim)``, so the attention's keyword arguments (masks, rotary tables) still fit.
    """

    def __init__(
        self, layer: nn.Module, hcs: list[nn.Module], expand: Any, reduce: Any, first: bool, last: bool
    ):
        super().__init__()
        self.layer, self.hcs = layer, nn.ModuleList(hcs)
        self.expand, self.reduce, self.first, self.last = expand, reduce, first, last

    def forward(self, hidden_states: Tensor, **kwargs: Any) -> Tensor:
        layer = self.layer
        x = self.expand(hidden_states) if self.first else hidden_states
        h0, add = self.hcs[0](x)
        out = layer.self_attn(hidden_states=layer.input_layernorm(h0), **kwargs)
        x = add(out[0] if isinstance(out, tuple) else out)
        h0, add = self.hcs[1](x)
        x = add(layer.mlp(layer.post_attention_layernorm(h0)))
        return self.reduce(x) if self.last else x


def apply_peer_hyper_connections(
    model: nn.Module, *, expansion_rate: int = 4, tanh: bool = True
) -> nn.Module:
    """Rewire a Llama-style model with the peer's dynamic hyper-connections, in place (``layer_index`` ``2k``,
    ``2k+1`` as in :func:`apply_hyper_connections`, so both start from the same stream)."""
    peer_version()
    from hyper_connections import get_init_and_expand_reduce_stream_functions

    init, expand, reduce = get_init_and_expand_reduce_stream_functions(
        expansion_rate, dim=model.config.hidden_size, disable=False
    )
    layers = _decoder_layers(model)
    last = len(layers) - 1
    for i, layer in enumerate(layers):
        hcs = [init(layer_index=2 * i + j, tanh=tanh) for j in (0, 1)]
        layers[i] = PeerDecoderLayer(layer, hcs, expand, reduce, i == 0, i == last)
    return model


@torch.no_grad()
def copy_connection_weights(ours: nn.Module, peer: nn.Module) -> int:
    """Copy every static and dynamic connection weight of ``ours`` into the peer model; returns the modules copied.

    The matrices have the same layout in both (``static_alpha = [A_m A_r]`` ``(n, n+1)``, ``static_beta``,
    ``dynamic_alpha_fn`` ``(dim, n+1)``, ``dynamic_beta_fn``, the two scales); the peer's RMSNorm gain ``γ`` (it
    uses ``γ + 1``) is set from our RMSNorm weight minus 1 when ours uses ``norm="rmsnorm"``.
    """
    mine = [m for m in ours.modules() if isinstance(m, HyperConnection)]
    theirs = [
        hc for layer in _decoder_layers(peer) if isinstance(layer, PeerDecoderLayer) for hc in layer.hcs
    ]
    if len(mine) != len(theirs):
        raise ValueError(
            f"models differ: {len(mine)} hyper-connections here, {len(theirs)} in the peer model"
        )
    for a, b in zip(mine, theirs):
        b.static_alpha.copy_(a.static_alpha)
        b.static_beta.copy_(a.static_beta)
        b.dynamic_alpha_fn.copy_(a.dynamic_alpha_fn)
        b.dynamic_beta_fn.copy_(a.dynamic_beta_fn)
        b.dynamic_alpha_scale.copy_(a.dynamic_alpha_scale.reshape(()))
        b.dynamic_beta_scale.copy_(a.dynamic_beta_scale.reshape(()))
        if isinstance(a.norm, nn.RMSNorm) and a.norm.weight is not None:
            b.norm.gamma.copy_(a.norm.weight - 1)
    return len(mine)


def _is_ours(layer: nn.Module) -> bool:
    return isinstance(layer, HyperConnectedDecoderLayer)


def peer(cfg: Any, ctx: Any) -> Any:
    """This package vs the peer on the same decoder: agreement at and away from init, step time, activations."""
    import copy

    from iclr25_hyper_connections._experiment import ModelSpec, build_model, saved_activation_bytes
    from iclr25_hyper_connections._hf import apply_hyper_connections
    from iclr25_hyper_connections._variants import Variant
    from iclr25_shared.cli import Result
    from iclr25_shared.device import PeakMemory, seed_everything

    version = peer_version()
    device = ctx.torch_device()
    seed_everything(cfg.seed)
    n = cfg.expansion_rate
    spec = ModelSpec(dim=cfg.dim, num_layers=cfg.num_layers, num_heads=cfg.num_heads, context=cfg.context)
    base = build_model(cfg.vocab_size, spec, Variant(name="residual"), seed=cfg.seed).to(device)
    gen = torch.Generator().manual_seed(cfg.seed)
    batch = torch.randint(0, cfg.vocab_size, (cfg.batch_size, cfg.context + 1), generator=gen).to(device)
    ours = apply_hyper_connections(copy.deepcopy(base), expansion_rate=n, norm="rmsnorm")
    ours_fast = apply_hyper_connections(copy.deepcopy(base), expansion_rate=n, norm="rmsnorm")
    for m in ours_fast.modules():
        if isinstance(m, HyperConnection):
            m.recompute = False
    ours_fused = apply_hyper_connections(copy.deepcopy(base), expansion_rate=n, fused=True)
    theirs = apply_peer_hyper_connections(copy.deepcopy(base), expansion_rate=n)
    names = [
        "residual",
        f"ours DHCx{n}",
        f"ours DHCx{n} (recompute=False)",
        f"ours DHCx{n} (fused, LayerNorm)",
        f"peer DHCx{n} ({version})",
    ]
    models = [base, ours, ours_fast, ours_fused, theirs]

    # 1. agreement: at initialisation, and with random connection weights (our stream-norm eps set to ~0)
    with torch.no_grad():
        ids = batch[:, :-1]
        init_diff = (ours.eval()(ids).logits - theirs.eval()(ids).logits).abs().max().item()
        init_vs_residual = (ours(ids).logits - base.eval()(ids).logits).abs().max().item()
        probe = copy.deepcopy(ours)
        probe_peer = copy.deepcopy(theirs)
        g = torch.Generator().manual_seed(cfg.seed + 1)
        for hc in (m for m in probe.modules() if isinstance(m, HyperConnection)):
            for p in (
                hc.static_alpha,
                hc.static_beta,
                hc.dynamic_alpha_fn,
                hc.dynamic_beta_fn,
                hc.norm.weight,
            ):
                p.add_(0.3 * torch.randn(p.shape, generator=g).to(p.device))
            hc.dynamic_alpha_scale.fill_(0.5)
            hc.dynamic_beta_scale.fill_(0.5)
            hc.norm.eps = 1e-30
        copy_connection_weights(probe, probe_peer)
        a, b = probe(ids).logits, probe_peer(ids).logits
        random_diff = (a - b).abs().max().item()
        random_scale = (a - base(ids).logits).abs().max().item()
        del probe, probe_peer
    for m in models:
        m.train()

    # 2. time and memory: the shared interleaved protocol (warm-up, rounds of one AdamW step per model in
    # rotating order; ratios = medians of per-round ratios with bootstrap intervals)
    from iclr25_shared.bench import interleaved

    opts = [torch.optim.AdamW(m.parameters(), lr=1e-4) for m in models]

    def loss_fn(model: nn.Module) -> Tensor:
        logits = model(input_ids=batch[:, :-1]).logits
        return nn.functional.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())

    def step(i: int) -> None:
        opts[i].zero_grad(set_to_none=True)
        loss_fn(models[i]).backward()
        opts[i].step()

    run = interleaved(
        {name: (lambda i=i: step(i)) for i, name in enumerate(names)},
        repeats=cfg.repeats,
        warmup=cfg.warmup_steps,
        device=device,
        progress=lambda it: ctx.progress(it, total=cfg.repeats, desc="peer"),
    )
    rows = []
    for i, (name, model) in enumerate(zip(names, models)):
        opts[i].zero_grad(set_to_none=True)
        params = list(model.parameters())
        act = saved_activation_bytes(lambda model=model: loss_fn(model), exclude=params)
        peak = None
        if device.type == "cuda":
            with PeakMemory(device) as mem:
                loss_fn(model).backward()
            peak = mem.peak_bytes / 2**20
        opts[i].zero_grad(set_to_none=True)
        vs_res, vs_peer = run.ratio(name, names[0]), run.ratio(name, names[-1])
        rows.append(
            {
                "implementation": name,
                "params": sum(p.numel() for p in params),
                "step ms": 1000 * run.median(name),
                "time vs residual": vs_res.value,
                "vs residual 95 % CI": f"[{vs_res.low:.3f}, {vs_res.high:.3f}]",
                "time vs peer": vs_peer.value,
                "vs peer 95 % CI": f"[{vs_peer.low:.3f}, {vs_peer.high:.3f}]",
                "saved activations MiB": act / 2**20,
                "peak memory MiB": peak,
            }
        )
    return Result(
        metrics={
            "peer_version": version,
            "max_abs_logit_diff_at_init": init_diff,
            "max_abs_logit_diff_at_init_vs_residual": init_vs_residual,
            "max_abs_logit_diff_random_weights": random_diff,
            "max_abs_logit_change_random_weights": random_scale,
            "bench_run": run.as_dict(),
        },
        tables={"ours vs peer": rows},
        notes=[
            "Same Llama decoder and base weights; ours with norm='rmsnorm' (the peer's stream norm; the fused row "
            "uses the paper's non-parametric LayerNorm); all at the eq. 14 initialisation with layer_index 2k / 2k+1.",
            "random weights: every connection weight of ours perturbed and copied into the peer; our stream "
            "RMSNorm eps set to ~0 (the peer's RMSNorm has none).",
            "saved activations: bytes autograd keeps for backward; peak memory: CUDA only.",
            f"time ratios: median over {cfg.repeats} rounds of per-round ratios, 95 % bootstrap interval over rounds "
            "(iclr25_shared.bench.interleaved); held equal: decoder, base weights, batch, one AdamW step per call; "
            "not equal: the connection code (and the fused row's stream norm: LayerNorm, not RMSNorm).",
        ],
    )
