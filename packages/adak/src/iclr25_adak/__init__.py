"""Ada-K routing (Yue et al., ICLR 2025, arXiv:2410.10456) for Hugging Face MoE language models.

A lightweight allocator per MoE layer (a linear map of the layer input to a softmax over k = 1..N) decides how
many experts each token activates; the host router still decides which ones. The allocators are trained with PPO
against the model's log-likelihood minus a cost per activated expert, with the backbone and routers frozen.

    from iclr25_adak import apply_adak, PPOConfig, train_allocators
    patch = apply_adak(model)                          # Mixtral / Qwen2-MoE / Qwen3-MoE / OLMoE / DeepSeek-V2/V3
    train_allocators(patch, batches, PPOConfig(lam=0.05))   # batches: iterable of (batch, seq) token ids
    model(input_ids)                                   # argmax k per token; patch.mean_k_per_layer(), patch.flops()

Nothing heavy is imported by ``import iclr25_adak``; torch and transformers load on first use of a name.
"""

from importlib import import_module
from typing import Any

from iclr25_shared import distribution_version

__version__ = distribution_version("iclr25-adak")

_LAZY = {
    "AdaKAllocator": "iclr25_adak._routing",
    "AdaKPatch": "iclr25_adak._routing",
    "AdaKRouter": "iclr25_adak._routing",
    "SUPPORTED_BLOCKS": "iclr25_adak._routing",
    "apply_adak": "iclr25_adak._routing",
    "expert_flops_per_token": "iclr25_adak._routing",
    "variable_k_route": "iclr25_adak._routing",
    "PPOConfig": "iclr25_adak._ppo",
    "PPOStats": "iclr25_adak._ppo",
    "ppo_objective": "iclr25_adak._ppo",
    "ppo_update": "iclr25_adak._ppo",
    "rollout": "iclr25_adak._ppo",
    "token_log_likelihood": "iclr25_adak._ppo",
    "train_allocators": "iclr25_adak._ppo",
    "evaluate_lm": "iclr25_adak._eval",
    "interpolate_static": "iclr25_adak._eval",
    "token_types": "iclr25_adak._eval",
}

__all__ = sorted([*_LAZY, "__version__"])


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'iclr25_adak' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
