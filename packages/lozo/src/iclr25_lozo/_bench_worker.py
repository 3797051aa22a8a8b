"""Entry point of one bench measurement in a fresh process: ``python -m iclr25_lozo._bench_worker '<json>'``."""

import json
import sys

from iclr25_lozo._bench import _bench_worker, _low_rank_add_worker

if __name__ == "__main__":
    args = json.loads(sys.argv[1])
    worker = _low_rank_add_worker if args.get("kind") == "low_rank_add" else _bench_worker
    print(json.dumps(worker(args)))
