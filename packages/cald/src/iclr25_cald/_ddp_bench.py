"""One rank of ``iclr25-cald bench --ddp-processes N ...``: data-parallel target-guided distillation steps.

Launched by the bench as ``python -m torch.distributed.run --standalone --nproc-per-node N -m iclr25_cald._ddp_bench
'<json>' OUT`` (gloo on CPU, NCCL on CUDA). The model is the reproduction's shape: a 2-layer SmolLM2-135M prefix
(random weights, the same sizes) as a sequence classifier, converted to Linformer, guided by its frozen teacher copy;
the global batch is the same at every process count (each rank trains on its share). Step times are wall-clock
between consecutive steps (after a barrier, the first ``warmup`` steps dropped: they build DDP's buckets and
AdamW's state); bytes are what DDP all-reduces (``iclr25_shared.distributed.ByteCounter``, gradients) and, counted
apart, what the loop itself all-reduces (the step's loss values). Rank 0 writes the JSON result to ``OUT``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def main(args: dict[str, Any], out: str) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist
    import transformers

    from iclr25_cald._convert import convert
    from iclr25_cald._distill import Guidance, distill
    from iclr25_shared.distributed import ByteCounter, derive_seed, init_process_group

    torch.set_num_threads(max(1, int(args.get("threads", 1))))
    device_type = "cuda" if args.get("device", "cpu").startswith("cuda") else "cpu"
    world = init_process_group(device_type)
    device = torch.device("cuda", world.local_rank) if device_type == "cuda" else torch.device("cpu")
    if device_type == "cuda":
        torch.cuda.set_device(device)
    seed, batch, seq = int(args["seed"]), int(args["batch_size"]), int(args["seq_len"])
    config = transformers.LlamaConfig(  # SmolLM2-135M's layer sizes, the reproduction's 2-layer prefix
        vocab_size=1024,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=2,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=seq,
        num_labels=11,
        pad_token_id=0,
        use_cache=False,
    )
    torch.manual_seed(seed)
    teacher = transformers.LlamaForSequenceClassification(config).to(device).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    student = convert(teacher, "linformer", k=int(args["k"]), max_seq_len=seq, seed=seed).model.to(device)
    for p in student.parameters():
        p.requires_grad_(True)
    gen = torch.Generator().manual_seed(seed)  # the same global batches on every rank
    batches = []
    for _ in range(4):
        ids = torch.randint(1, config.vocab_size, (batch, seq), generator=gen)
        mask = (torch.arange(seq) < torch.randint(seq // 2, seq + 1, (batch, 1), generator=gen)).long()
        batches.append(
            {
                "input_ids": ids.masked_fill(mask == 0, 0).to(device),
                "attention_mask": mask.to(device),
                "labels": torch.randint(0, 11, (batch,), generator=gen).to(device),
            }
        )
    counter = ByteCounter()
    loop_bytes = {"bytes": 0, "calls": 0}
    real_all_reduce = dist.all_reduce if world.is_distributed else None
    hooked = {"in_hook": False}

    def hook(state, bucket):
        hooked["in_hook"] = True
        try:
            return counter.hook(state, bucket)
        finally:
            hooked["in_hook"] = False

    def counting_all_reduce(tensor: Any, *a: Any, **k: Any) -> Any:
        if not hooked["in_hook"]:
            loop_bytes["bytes"] += tensor.numel() * tensor.element_size()
            loop_bytes["calls"] += 1
        return real_all_reduce(tensor, *a, **k)

    warmup, steps = int(args["warmup"]), int(args["steps"])
    stamps: list[float] = []

    def on_step(step: int, _record: dict) -> None:
        if device_type == "cuda":
            torch.cuda.synchronize()
        stamps.append(time.perf_counter())
        if step + 1 == warmup:
            counter.reset()
            loop_bytes.update(bytes=0, calls=0)

    torch.manual_seed(derive_seed(seed, world.rank) if world.is_distributed else seed)
    if world.is_distributed:
        dist.barrier()
        dist.all_reduce = counting_all_reduce  # type: ignore[assignment]
    try:
        distill(
            student,
            batches,
            steps=warmup + steps,
            guidance=Guidance("target", alpha_layer=1.0),
            teacher=teacher,
            lr=5e-4,
            trainable=lambda name, _p: "embed_tokens" not in name,
            on_step=on_step,
            comm_hook=hook,
        )
    finally:
        if world.is_distributed:
            dist.all_reduce = real_all_reduce  # type: ignore[assignment]
    times = np.diff(stamps[warmup - 1 :])
    trainable = sum(p.numel() for n, p in student.named_parameters() if "embed_tokens" not in n)
    result = {
        "processes": world.world_size,
        "global_batch": batch,
        "per_rank_batch": batch // world.world_size,
        "seq_len": seq,
        "device": str(device),
        "threads_per_process": torch.get_num_threads(),
        "trainable_parameters": trainable,
        "timed_steps": len(times),
        "step_seconds_median": float(np.median(times)),
        "step_seconds_min": float(np.min(times)),
        "step_seconds_max": float(np.max(times)),
        "gradient_bytes_per_step": counter.bytes / steps,
        "gradient_all_reduces_per_step": counter.calls / steps,
        "loop_bytes_per_step": loop_bytes["bytes"] / steps,
        "loop_all_reduces_per_step": loop_bytes["calls"] / steps,
    }
    if world.is_main:
        with open(out, "w", encoding="utf-8") as fh:
            json.dump(result, fh)
    if world.is_distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]), sys.argv[2])
