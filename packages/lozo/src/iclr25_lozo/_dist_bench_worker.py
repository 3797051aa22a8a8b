"""One rank of ``iclr25-lozo bench --distributed``, launched by ``torch.distributed.run`` (gloo on CPU, NCCL on
GPU): data-parallel LOZO (one all-reduce of two float64 losses per step) against DDP + Adam (an all-reduce of the
whole gradient), each on this rank's shard of the same global batch. Bytes are counted at the all-reduce calls
themselves (a counting wrapper around ``torch.distributed.all_reduce`` for LOZO, a DDP communication hook for
Adam). Rank 0 writes the JSON result to the path in ``argv[2]``.

Usage: ``python -m torch.distributed.run --nproc_per_node N -m iclr25_lozo._dist_bench_worker '<json>' OUT``.
"""

import json
import sys
from typing import Any

import torch
import torch.distributed as dist


def main(args: dict[str, Any], out: str) -> None:
    from torch.nn.parallel import DistributedDataParallel

    from iclr25_lozo._models import bench_model_and_batch
    from iclr25_lozo._optimizer import LOZO

    torch.set_num_threads(max(1, int(args.get("threads", 1))))
    use_cuda = torch.cuda.is_available() and args.get("device", "auto") != "cpu"
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", rank % torch.cuda.device_count()) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    batch, seq = int(args["batch_size"]), int(args["seq_len"])
    if batch % world:
        raise ValueError(f"batch_size={batch} must be divisible by the number of processes ({world})")
    model, ids = bench_model_and_batch(
        args["model"], device=device, dtype=args.get("dtype", "float32"), batch_size=batch, seq_len=seq
    )
    shard = ids[rank * batch // world : (rank + 1) * batch // world].to(device)
    result: dict[str, Any] = {"processes": world, "per_rank_batch": len(shard), "device": str(device)}
    result["parameters"] = sum(p.numel() for p in model.parameters())

    # -- data-parallel LOZO: count what goes through all_reduce during the timed steps --------------------------
    sent = {"bytes": 0, "calls": 0}
    real_all_reduce = dist.all_reduce

    def counting_all_reduce(tensor: torch.Tensor, *a: Any, **k: Any) -> Any:
        sent["bytes"] += tensor.numel() * tensor.element_size()
        sent["calls"] += 1
        return real_all_reduce(tensor, *a, **k)

    opt = LOZO(model, lr=1e-7, eps=1e-3, rank=2, interval=50, seed=0, data_parallel=True)

    def lozo_step(opt: LOZO = opt) -> None:
        opt.step(lambda: model(input_ids=shard, labels=shard).loss.float())

    dist.all_reduce = counting_all_reduce  # type: ignore[assignment]
    try:
        lozo_step()
        sent.update(bytes=0, calls=0)
        lozo_step()
        result["lozo_bytes_per_step"] = sent["bytes"]
        result["lozo_all_reduces_per_step"] = sent["calls"]
    finally:
        dist.all_reduce = real_all_reduce  # type: ignore[assignment]

    # -- DDP + Adam: count the gradient buckets DDP all-reduces -------------------------------------------------
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    ddp = DistributedDataParallel(model, device_ids=[device.index] if use_cuda else None)
    grad_sent = {"bytes": 0}

    # DDP checks these annotations at registration (so no ``from __future__ import annotations`` in this module)
    def counting_hook(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        buffer = bucket.buffer()
        grad_sent["bytes"] += buffer.numel() * buffer.element_size()
        return allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, counting_hook)
    adam = torch.optim.AdamW([p for p in ddp.parameters() if p.requires_grad], lr=1e-7)

    def adam_step() -> None:
        adam.zero_grad(set_to_none=True)
        ddp(input_ids=shard, labels=shard).loss.float().backward()
        adam.step()

    adam_step()
    grad_sent["bytes"] = 0
    adam_step()
    result["ddp_adam_bytes_per_step"] = grad_sent["bytes"]
    # both arms timed in this process, interleaved (every rank runs them in the same order, so the collectives
    # match); a barrier before each call so that a rank's time is the step's, not its wait for the others
    from iclr25_shared.bench import interleaved

    def synced(step: Any) -> Any:
        def call() -> None:
            dist.barrier()
            step()
            dist.barrier()

        return call

    run = interleaved(
        {"lozo": synced(lozo_step), "ddp_adam": synced(adam_step)},
        repeats=int(args["repeats"]),
        warmup=1,
        device=device,
    )
    result["lozo_step_seconds"] = run.median("lozo")
    result["ddp_adam_step_seconds"] = run.median("ddp_adam")
    est = run.ratio("ddp_adam", "lozo")
    result["ddp_adam_vs_lozo_time"] = [est.value, est.low, est.high]
    if rank == 0:
        with open(out, "w") as fh:
            json.dump(result, fh)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]), sys.argv[2])
