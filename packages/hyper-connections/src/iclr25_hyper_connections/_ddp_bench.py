"""One rank of ``iclr25-hyper-connections bench --processes N``, launched by ``torch.distributed.run`` (gloo on CPU,
NCCL on CUDA): DDP training steps of residual and HCxn on this rank's share of the same global batch, timed with
the shared interleaved protocol; gradient bytes all-reduced per step counted with
:class:`iclr25_shared.distributed.ByteCounter`. Rank 0 writes the rows as JSON to ``argv[2]``.

Usage: ``python -m torch.distributed.run --standalone --nproc-per-node N -m iclr25_hyper_connections._ddp_bench
'<json>' OUT``.
"""

import json
import sys
from typing import Any

import torch


def main(args: dict[str, Any], out: str) -> None:
    from torch.nn.parallel import DistributedDataParallel

    from iclr25_hyper_connections._experiment import ModelSpec, _lm_loss, build_model
    from iclr25_hyper_connections._variants import Variant
    from iclr25_shared.bench import interleaved
    from iclr25_shared.distributed import ByteCounter, destroy_process_group, init_process_group, world

    torch.set_num_threads(1)
    device = torch.device(args["device"])
    here = world()
    if device.type == "cuda":
        device = torch.device("cuda", here.local_rank)
    here = init_process_group(device)
    spec = ModelSpec(
        dim=args["dim"], num_layers=args["num_layers"], num_heads=args["num_heads"], context=args["context"]
    )
    gen = torch.Generator().manual_seed(args["seed"])
    batch = torch.randint(0, args["vocab_size"], (args["batch_size"], args["context"] + 1), generator=gen)
    local = batch[here.rank :: here.world_size].to(device)  # DistributedSampler's split of the global batch
    n = args["expansion_rate"]
    kind = "DHC" if args["dynamic"] else "SHC"
    variants = [
        Variant(name="residual"),
        Variant(name=f"{kind}x{n}", expansion_rate=n, dynamic=args["dynamic"]),
    ]
    nets, opts, counters, params = [], [], [], []
    for v in variants:
        model = build_model(args["vocab_size"], spec, v, seed=args["seed"], fused=args["fused"]).to(device)
        model.train()
        counter = ByteCounter()
        net: torch.nn.Module = model
        if here.is_distributed:
            net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
            net.register_comm_hook(None, counter.hook)
        nets.append(net)
        opts.append(torch.optim.AdamW(model.parameters(), lr=1e-4))
        counters.append(counter)
        params.append(sum(p.numel() for p in model.parameters()))

    def step(i: int) -> None:
        opts[i].zero_grad(set_to_none=True)
        _lm_loss(nets[i], local).backward()
        opts[i].step()

    run = interleaved(
        {v.name: (lambda i=i: step(i)) for i, v in enumerate(variants)},
        repeats=args["repeats"],
        warmup=max(1, args["warmup"]),  # the first DDP step builds its buckets
        device=device,
    )
    rows = []
    for i, v in enumerate(variants):
        counters[i].reset()
        step(i)
        est = run.ratio(v.name, "residual")
        rows.append(
            {
                "processes": here.world_size,
                "variant": v.name,
                "batch per process": len(local),
                "step s (median)": run.median(v.name),
                "time vs residual": est.value,
                "time vs residual 95 % CI": f"[{est.low:.3f}, {est.high:.3f}]",
                "bytes all-reduced per step": counters[i].bytes,
                "all-reduce calls per step": counters[i].calls,
                "params": params[i],
                "rounds": args["repeats"],
                "load average 1m (before / after)": f"{run.env['load_average_1m']:.1f} / "
                f"{run.env['load_average_1m_after']:.1f}",
            }
        )
    if here.is_main:
        with open(out, "w", encoding="utf-8") as fh:
            json.dump(rows, fh)
    destroy_process_group()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]), sys.argv[2])
