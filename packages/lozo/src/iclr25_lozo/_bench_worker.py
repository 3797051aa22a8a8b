"""Entry point of one bench measurement in a fresh process: ``python -m iclr25_lozo._bench_worker '<json>'``."""

import json
import sys

from iclr25_lozo._bench import _bench_worker

if __name__ == "__main__":
    print(json.dumps(_bench_worker(json.loads(sys.argv[1]))))
