"""Ada-K routing (Yue et al., ICLR 2025, arXiv:2410.10456) for Hugging Face MoE language models.

A lightweight allocator per MoE layer (a linear map of the layer input to a softmax over k = 1..N) decides how
many experts each token activates; the host router still decides which ones. The allocators are trained with PPO
against the model's log-likelihood minus a cost per activated expert, with the backbone and routers frozen.

    from iclr25_adak import apply_adak, load_pretrained, PPOConfig, train_allocators
    patch = apply_adak(model)                          # Mixtral / Qwen2-MoE / Qwen3-MoE / OLMoE / DeepSeek-V2/V3
    train_allocators(patch, batches, PPOConfig(lam=0.05))   # batches: iterable of (batch, seq) token ids
    model(input_ids)                                   # argmax k per token; patch.mean_k_per_layer(), patch.flops()
    model.save_pretrained("out"); patch = load_pretrained("out")   # the host's checkpoint + the allocators
    patch.remove()                                     # the original model, flags and modes restored

Nothing heavy is imported by ``import iclr25_adak``; torch and transformers load on first use of a name.
"""

from iclr25_shared import distribution_version, lazy_exports

__version__ = distribution_version("iclr25-adak")

_LAZY = {
    "ALLOCATORS_FILE": "_routing",
    "AdaKAllocator": "_routing",
    "AdaKPatch": "_routing",
    "AdaKRouter": "_routing",
    "SUPPORTED_BLOCKS": "_routing",
    "apply_adak": "_routing",
    "load_pretrained": "_routing",
    "expert_flops_per_token": "_routing",
    "variable_k_route": "_routing",
    "grouped_experts_forward": "_dispatch",
    "PPOConfig": "_ppo",
    "PPOStats": "_ppo",
    "ppo_objective": "_ppo",
    "ppo_update": "_ppo",
    "rollout": "_ppo",
    "token_log_likelihood": "_ppo",
    "train_allocators": "_ppo",
    "evaluate_lm": "_eval",
    "interpolate_static": "_eval",
    "token_types": "_eval",
}

__all__ = sorted([*_LAZY, "__version__"])

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
