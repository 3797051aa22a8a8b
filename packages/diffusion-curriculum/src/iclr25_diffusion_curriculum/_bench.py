"""``bench``: the curriculum sampler's per-step overhead against a training step and ``torch.randint``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from iclr25_diffusion_curriculum._experiment import make_sampler
from iclr25_diffusion_curriculum._training import make_unet
from iclr25_shared.cli import Result, RunContext
from iclr25_shared.device import seed_everything

__all__ = ["bench"]


class _Steps:
    """One UNet, batch, optimiser and curriculum sampler; a training step with uniform or curriculum timesteps."""

    def __init__(self, cfg: Any, device: torch.device) -> None:
        from diffusers import DDPMScheduler

        self.cfg, self.device = cfg, device
        x = torch.randn(
            cfg.batch_size,
            1,
            cfg.image_size,
            cfg.image_size,
            generator=torch.Generator().manual_seed(cfg.seed),
        )
        torch.manual_seed(cfg.seed)
        self.model = make_unet(cfg.image_size, cfg.channels).to(device)
        self.scheduler = DDPMScheduler(num_train_timesteps=cfg.num_train_timesteps)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.sampler = make_sampler(
            "curriculum",
            num_train_timesteps=cfg.num_train_timesteps,
            num_clusters=cfg.num_clusters,
            patience=cfg.patience,
            max_steps_per_stage=None,
            ema=0.99,
        )
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.x = x.to(device)

    def train_step(self, t: torch.Tensor) -> float:
        """One step (noise, forward, ε-MSE, backward, Adam) at timesteps ``t``; the loss read back."""
        noise = torch.randn(self.x.shape, generator=self.gen).to(self.device)
        pred = self.model(self.scheduler.add_noise(self.x, noise, t), t).sample
        loss = (pred - noise).pow(2).mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return float(loss.detach())

    def uniform_step(self) -> None:
        """A step at timesteps drawn by ``torch.randint``."""
        cfg = self.cfg
        t = torch.randint(0, cfg.num_train_timesteps, (cfg.batch_size,), generator=self.gen).to(self.device)
        self.train_step(t)

    def curriculum_step(self) -> None:
        """A step at timesteps drawn by the curriculum sampler, then its pacer update."""
        self.sampler.update(
            self.train_step(self.sampler.sample(self.cfg.batch_size, self.gen, device=self.device))
        )


def _time_calls(cfg: Any, ctx: RunContext, s: _Steps) -> Any:
    """The sampler's own work apart from the step: blocks of sampler_calls calls, interleaved with torch.randint."""
    from iclr25_shared.bench import interleaved

    reps = cfg.sampler_calls
    losses = np.random.default_rng(cfg.seed).uniform(0.5, 1.0, reps)

    def curriculum_calls() -> None:
        for i in range(reps):
            s.sampler.sample(cfg.batch_size, s.gen, device=s.device)
            s.sampler.update(float(losses[i]))

    def uniform_calls() -> None:
        for _ in range(reps):
            torch.randint(0, cfg.num_train_timesteps, (cfg.batch_size,), generator=s.gen).to(s.device)

    return interleaved(
        {"randint": uniform_calls, "sample+update": curriculum_calls},
        repeats=cfg.repeats,
        warmup=1,
        device=s.device,
        threads=ctx.threads or None,
    )


def _rows(
    cfg: Any, steps_run: Any, step_ratio: Any, call_ratio: Any, per_step: tuple
) -> list[dict[str, Any]]:
    """Median time per step of each arm and its ratio to the uniform one, with what each comparison holds equal;
    ``per_step`` = seconds of a uniform step, of one sampler call and of one ``torch.randint``."""
    reps = cfg.sampler_calls
    step_s, cur_s, base_s = per_step
    held_steps = (
        "the same UNet, batch, optimiser and one loss read-back per step; not equal: the timesteps drawn"
    )
    held_calls = f"{reps} calls per round, batch {cfg.batch_size}; no training"
    return [
        {
            "what": "training step, uniform t (UNet fwd+bwd+Adam)",
            "median per step (µs)": step_s * 1e6,
            "ratio": 1.0,
            "interval": "",
            "rounds": cfg.steps,
            "held equal": held_steps,
        },
        {
            "what": "training step, curriculum t (sample + step + pacer update)",
            "median per step (µs)": steps_run.median("curriculum") * 1e6,
            "ratio": step_ratio.value,
            "interval": f"[{step_ratio.low:.4g}, {step_ratio.high:.4g}]",
            "rounds": cfg.steps,
            "held equal": held_steps,
        },
        {
            "what": "uniform: torch.randint",
            "median per step (µs)": base_s * 1e6,
            "ratio": 1.0,
            "interval": "",
            "rounds": cfg.repeats,
            "held equal": held_calls,
        },
        {
            "what": "curriculum: sampler.sample + sampler.update",
            "median per step (µs)": cur_s * 1e6,
            "ratio": call_ratio.value,
            "interval": f"[{call_ratio.low:.3g}, {call_ratio.high:.3g}]",
            "rounds": cfg.repeats,
            "held equal": held_calls,
        },
    ]


def bench(cfg: Any, ctx: RunContext) -> Result:
    """``bench``: time a training step and the curriculum sampler's per-step work (sample + update) in one run."""
    from iclr25_shared.bench import interleaved

    device = ctx.torch_device()
    seed_everything(cfg.seed)
    s = _Steps(cfg, device)
    # Whole training steps, interleaved: the same model, batch, optimiser and loss read-back per step; only where
    # the timesteps come from differs (and the pacer update).
    steps_run = interleaved(
        {"uniform": s.uniform_step, "curriculum": s.curriculum_step},
        repeats=cfg.steps,
        warmup=cfg.warmup,
        device=device,
        threads=ctx.threads or None,
    )
    calls_run = _time_calls(cfg, ctx, s)
    reps = cfg.sampler_calls
    step_s = steps_run.median("uniform")
    cur_s, base_s = calls_run.median("sample+update") / reps, calls_run.median("randint") / reps
    step_ratio = steps_run.ratio("curriculum", "uniform")
    call_ratio = calls_run.ratio("sample+update", "randint")
    ctx.log.info(
        f"training step {step_s * 1e3:.2f} ms (curriculum/uniform {step_ratio.value:.3f}); curriculum "
        f"sample+update {cur_s * 1e6:.1f} µs; torch.randint {base_s * 1e6:.1f} µs"
    )
    return Result(
        metrics={
            "step_ms": step_s * 1e3,
            "curriculum_step_vs_uniform_step": step_ratio.value,
            "curriculum_step_vs_uniform_step_interval": [step_ratio.low, step_ratio.high],
            "curriculum_sampler_us": cur_s * 1e6,
            "uniform_randint_us": base_s * 1e6,
            "sampler_vs_randint_ratio": call_ratio.value,
            "overhead_fraction_of_step": (cur_s - base_s) / step_s,
            "sampler_fraction_of_step": cur_s / step_s,
            "below_1_percent": bool(cur_s / step_s < 0.01),
            "bench": {"steps": steps_run.as_dict(), "sampler_calls": calls_run.as_dict()},
        },
        tables={"per_step": _rows(cfg, steps_run, step_ratio, call_ratio, (step_s, cur_s, base_s))},
        notes=[
            f"iclr25_shared.bench.interleaved on {device}: training steps {cfg.warmup} warm-up + {cfg.steps} rounds "
            f"(one uniform and one curriculum step per round, order rotated); sampler calls 1 warm-up + "
            f"{cfg.repeats} rounds of {reps} calls each; ratios are medians of per-round ratios with a 95 % "
            "bootstrap interval over rounds"
        ],
    )
