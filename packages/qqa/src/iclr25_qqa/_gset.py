"""The G-set max-cut benchmark: QQA beside simulated annealing at equal wall time, and the step time against the
cost of the energy gradient alone.

The G-set (Helmberg & Rendl 1997, rudy generator) is the standard max-cut benchmark; the best-known cuts below are
literature values (Benlic & Hao, "Breakout local search for the max-cut problem", 2013, and later tables), not
recomputed here.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from iclr25_qqa._anneal import anneal
from iclr25_qqa._baselines import simulated_annealing
from iclr25_qqa._graphs import load_graph, read_gset
from iclr25_qqa._problems import MaxCut

__all__ = [
    "DATA_ENV",
    "GSET_BEST_KNOWN",
    "OFFICIAL_PROFILES",
    "Instance",
    "Pace",
    "default_gset_dir",
    "load_instance",
    "official_runs",
    "parse_official",
    "step_arms",
]

DATA_ENV = "ICLR25_DATA"
"""Environment variable naming the folder of the kit's offline data (its ``gset/`` holds the G-set files)."""


def default_gset_dir() -> Path | None:
    """The kit's G-set folder, used when no folder is given: ``$ICLR25_DATA/gset`` when that variable is set, else
    ``shared/data/gset`` in the nearest folder above this package that has one (a checkout of the project beside
    its offline data); ``None`` when there is none (an installed wheel)."""
    env = os.environ.get(DATA_ENV, "").strip()
    if env:
        return Path(env).expanduser() / "gset"
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "data" / "gset"
        if candidate.is_dir():
            return candidate
    return None


GSET_BEST_KNOWN: dict[str, float] = {
    "G1": 11624,
    "G2": 11620,
    "G3": 11622,
    "G11": 564,
    "G12": 556,
    "G13": 582,
    "G14": 3064,
    "G15": 3050,
    "G22": 13359,
    "G43": 6660,
    "G55": 10294,
    "G70": 9595,
}
"""Best-known G-set cuts (literature). G55: 10294 is the 2013 value (newer tables give 10299); G70: tables differ
(9541, 9591, 9595), so its gap is uncertain."""


@dataclass(frozen=True)
class Instance:
    """A benchmark instance: label, the max-cut problem and its best-known (or proven optimal) cut."""

    label: str
    problem: MaxCut
    best_known: float | None
    kind: str


def load_instance(name: str, gset_dir: Path | None = None, layout: str = "auto") -> Instance:
    """``G<k>`` (read as ``gset_dir/G<k>.txt``), a path to a rudy file, or a graph spec such as ``torus:60x50``.

    Args:
        name: the instance.
        gset_dir: the folder of G-set files; ``None``: :func:`default_gset_dir`.
        layout: how ``Q`` reaches the solver (see :class:`~iclr25_qqa.MaxCut`).

    Raises:
        FileNotFoundError: a ``G<k>`` name whose file is not in ``gset_dir`` (the message names both); a rudy file
            that does not exist.
        DatasetUnavailable: a ``G<k>`` name, no ``gset_dir`` and no kit data found.
        ValueError: an unknown spec or a malformed file (named with file and line).
    """
    stem = name.strip()
    if stem.upper().startswith("G") and stem[1:].isdigit():
        key = "G" + stem[1:]
        folder = gset_dir if gset_dir is not None else default_gset_dir()
        if folder is None:
            from iclr25_shared.errors import DatasetUnavailable

            raise DatasetUnavailable(
                f"G-set instance {name!r}: no G-set folder given and none found; pass --gset-dir FOLDER (holding "
                f"{key}.txt; the files are at web.stanford.edu/~yyye/yyye/Gset/) or set {DATA_ENV} to a folder "
                "holding gset/"
            )
        path = Path(folder) / f"{key}.txt"
        if not path.is_file():
            raise FileNotFoundError(
                f"G-set instance {name!r} needs the file {str(path)!r}, which does not exist"
            )
        return Instance(key, MaxCut(read_gset(path), layout=layout), GSET_BEST_KNOWN.get(key), "best known")
    spec = load_graph(stem)
    best = spec.best_known.get("maxcut")
    key = Path(stem).stem if os.sep in stem or stem.endswith(".txt") else stem
    best = GSET_BEST_KNOWN.get(key, best)
    kind = "optimal (torus)" if stem.startswith("torus:") else "best known"
    return Instance(spec.name, MaxCut(spec.graph, layout=layout), best, kind)


def mean_weighted_degree(problem: MaxCut) -> float:
    """``d̄ = mean_i Σ_j |w_ij|``: the scale of the relaxed max-cut energy's curvature per node."""
    return float(2.0 * np.abs(problem.edge_w).sum() / problem.num_nodes)


def first_time(trace: list[tuple[float, float]], target: float) -> float | None:
    """The first time at which the best-so-far ``value`` of ``(seconds, value)`` pairs reached ``target``."""
    for seconds, value in trace:
        if value >= target - 1e-9:
            return seconds
    return None


def qqa_run(
    problem: MaxCut, budget: float, seed: int, replicas: int, step_s: float | Pace, **kw: Any
) -> dict[str, Any]:
    """QQA with as many steps as ``budget`` seconds allow at ``step_s`` seconds per step (measured before; or a
    :class:`Pace`, which learns from this run's time), then a 1-flip polish of the best replica
    (:meth:`MaxCut.local_search`), timed and reported separately: ``cut`` is the annealer's own answer,
    ``polished_cut`` the polished one, ``polish_s`` the polish's seconds (outside the budget)."""
    pace = step_s if isinstance(step_s, Pace) else Pace(step_s)
    steps = pace.units(budget)
    res = anneal(problem, key=seed, replicas=replicas, steps=steps, chunk=min(100, steps), **kw)
    pace.observe(steps, res.wall_time)
    trace = [(p["seconds"], p["best_objective"]) for p in res.trace]
    t0 = time.perf_counter()
    polished = problem.local_search(res.best_solution)
    polish_s = time.perf_counter() - t0
    return {"cut": res.best_objective, "seconds": res.wall_time, "steps": steps, "trace": trace,
            "compile_s": res.compile_time, "polished_cut": problem.objective(polished), "polish_s": polish_s}  # fmt: skip


def step_arms(
    problem: MaxCut,
    replicas: int,
    *,
    chunk: int = 50,
    devices: Any = None,
    **kw: Any,
) -> dict[str, Any]:
    """Zero-argument callables for :func:`iclr25_shared.bench.interleaved`, each running ``chunk`` steps:

    - ``QQA S=<replicas>``: the annealing step as run (compiled chunk, all of it);
    - ``QQA S=<replicas>, T=0``: without the Langevin noise (its cost is the difference);
    - ``QQA S=<replicas // 2>`` and ``QQA S=<2 * replicas>``: how the cost scales with the replicas filling the
      vector width (per replica-step, the table divides by S);
    - ``value+grad (edges)`` / ``value+grad (dense)``: the energy's value and gradient alone, ``chunk`` times in one
      compiled loop, for the edge list and the dense ``Q``: the floor a step is compared against.
    """
    import jax
    import jax.numpy as jnp

    from iclr25_qqa._anneal import chunk_runner

    arms: dict[str, Any] = {}
    common = dict(kw, chunk=chunk)
    arms[f"QQA S={replicas}"] = chunk_runner(problem, replicas=replicas, devices=devices, **common)
    arms[f"QQA S={replicas}, T=0"] = chunk_runner(
        problem, replicas=replicas, devices=devices, **dict(common, temperature=0.0)
    )
    for s in (max(replicas // 2, 1), 2 * replicas):
        arms[f"QQA S={s}"] = chunk_runner(problem, replicas=s, devices=devices, **common)
    x0 = jax.random.uniform(jax.random.key(0), (replicas, problem.num_nodes), jnp.float32)
    old = problem.layout
    try:
        for layout in ("edges", "dense"):
            problem.layout = layout
            arrays = problem.energy_arrays()

            def floor(x: Any, arrays: Any = arrays) -> Any:
                grad = jax.grad(lambda z: jnp.sum(MaxCut.energy_fn(arrays, z)))

                def body(_: Any, z: Any) -> Any:
                    return z - 1e-7 * grad(z)

                return jax.lax.fori_loop(0, chunk, body, x)

            fn = jax.jit(floor)
            arms[f"value+grad ({layout})"] = lambda fn=fn: jax.block_until_ready(fn(x0))
    finally:
        problem.layout = old
    return arms


def calibrate_qqa(problem: MaxCut, replicas: int, seed: int, **kw: Any) -> float:
    """Seconds per QQA step for this problem and replica count: 400 steps after compilation, timed over the last
    300 (the first chunk absorbs warm-up)."""
    res = anneal(problem, key=seed, replicas=replicas, steps=400, chunk=100, **kw)
    return (res.trace[-1]["seconds"] - res.trace[0]["seconds"]) / 300


def sa_run(problem: MaxCut, budget: float, seed: int, reads: int, sweeps: float | Pace) -> dict[str, Any]:
    """Simulated annealing with ``reads`` reads of ``sweeps`` sweeps (from :func:`calibrate_sa`; or a :class:`Pace`
    for ``budget``, which learns from this run's time).

    Reads run one after another, so the best of the first ``j`` reads was known at ``j/reads`` of the run: that
    gives the anytime trace used for the time to reach a target.
    """
    pace = sweeps if isinstance(sweeps, Pace) else None
    sweeps = pace.units(budget, low=1) if pace is not None else max(int(sweeps), 1)
    res = simulated_annealing(problem, num_reads=reads, num_sweeps=sweeps, seed=seed)
    if pace is not None:
        pace.observe(sweeps, res.seconds)
    best_so_far = np.maximum.accumulate(res.per_read)
    trace = [((j + 1) / reads * res.seconds, float(v)) for j, v in enumerate(best_so_far)]
    return {"cut": res.objective, "seconds": res.seconds, "sweeps": sweeps, "trace": trace}


def calibrate_sa_fit(problem: MaxCut, seed: int, reads: int, budget: float) -> tuple[float, float]:
    """``(a, b)`` of ``t = a + b·sweeps`` for ``reads`` reads, from two timed calls.

    A 100-sweep probe and a call sized to a quarter of the budget (``a``: per-call costs such as the β range and
    the model conversion). The slope is kept at least a quarter of the average cost per sweep, so timing noise
    cannot make the estimate explode.
    """
    s1 = 100
    t1 = simulated_annealing(problem, num_reads=reads, num_sweeps=s1, seed=seed).seconds
    s2 = max(int(budget / 4 / (t1 / s1)), 2 * s1)
    t2 = simulated_annealing(problem, num_reads=reads, num_sweeps=s2, seed=seed).seconds
    average = t2 / s2
    b = (t2 - t1) / (s2 - s1)
    if not b >= 0.25 * average:  # timing noise (t2 <= t1 under load): fall back to the plain average
        b = average
    return max(t1 - b * s1, 0.0), b


def calibrate_sa(problem: MaxCut, seed: int, reads: int, budget: float) -> float:
    """Sweeps per read that fill ``budget`` seconds with ``reads`` reads (:func:`calibrate_sa_fit`)."""
    a, b = calibrate_sa_fit(problem, seed, reads, budget)
    return max((budget - a) / b, 1.0)


class Pace:
    """How many steps (sweeps, epochs) fill a budget for one method on one instance, learned as the runs go.

    The first run uses the calibration's seconds per unit; every later one the mean of the rates the runs so far
    actually had (``(seconds − fixed) / units``). The shared machine's load changes between the calibration and
    the runs (a 400-step calibration measured twice the per-step time the runs then had, issue 43's bench), so the
    measured pace of the runs themselves holds the budget better than any calibration made before them.
    """

    def __init__(self, per_unit: float, fixed: float = 0.0) -> None:
        self.per_unit, self.fixed = float(per_unit), float(fixed)
        self.observed: list[float] = []

    def units(self, budget: float, low: int = 2) -> int:
        rate = float(np.mean(self.observed)) if self.observed else self.per_unit
        return max(int((budget - self.fixed) / rate), low)

    def observe(self, units: int, seconds: float) -> None:
        if units > 0 and seconds > self.fixed:
            self.observed.append((seconds - self.fixed) / units)


OFFICIAL_PROFILES: dict[str, dict[str, Any]] = {
    "balanced": {"api": "solve", "profile": "balanced"},
    "fast": {"api": "solve", "profile": "fast"},
    "anneal-defaults": {"api": "anneal"},
}
"""The official package's own settings the bench can run (and tune over): ``balanced`` and ``fast`` are profiles of
its stable API ``qqa.solve`` (``qqa.config``: ``balanced``, the default, S = 128, lr 0.05, diversity 0.01, restarts
after 250 stale epochs; ``fast``, S = 32, lr 0.1, no diversity; both a cosine γ schedule −2 → 0.1, gradient
clipping at 100, heterogeneous replicas with replica exchange every 100 epochs, robust objective scaling);
``anneal-defaults`` is its legacy ``qqa.anneal`` with every default (S = 100, lr 1, linear γ −2 → 0.1, no
diversity), the setting issue 43 measured. Every profile runs with its own polish off (``polish=False``): the bench
applies the same 1-flip polish (the official's own ``greedy_one_flip`` is that rule too) to every method's answer."""

_OFFICIAL_DRIVER = r"""
import json, sys, time
import networkx as nx, numpy as np, torch, qqa
torch.set_num_threads(1)  # the JAX side runs XLA on one thread too
job = json.load(sys.stdin)
g = nx.Graph()
g.add_nodes_from(range(job["n"]))
g.add_weighted_edges_from(zip(job["u"], job["v"], job["w"]))
problem = qqa.MaxCut(g)

def run(spec, epochs, seed, limit):
    if spec["api"] == "solve":  # the stable API with one of its profiles, on the CPU
        r = qqa.solve(problem, profile=spec["profile"], device="cpu", seed=seed, epochs=epochs, budget=limit,
                      polish=False)
        sol, energy = r.raw_solution, r.internal_energy
        done = r.diagnostics.get("completed_epochs")
    else:  # the legacy qqa.anneal, every default
        torch.manual_seed(seed)
        r = qqa.anneal(problem, num_epochs=epochs, time_limit=limit, verbose=False, polish=False,
                       record_history=False)
        sol, energy = r.best_sol, r.best_obj
        done = getattr(r, "diagnostics", {}).get("completed_epochs")
    sol = [int(round(float(v))) for v in sol.detach().cpu().numpy().reshape(-1)]
    return sol, (None if energy is None else float(energy)), done

out = []
for spec in job["profiles"]:
    run(spec, 5, 0, None)  # warm-up (lazy initialisation, first-call costs)
    t0 = time.perf_counter(); run(spec, 5, 0, None); ta = time.perf_counter() - t0
    n = 5 + job["timing_epochs"]
    t0 = time.perf_counter(); run(spec, n, 0, None); tb = time.perf_counter() - t0
    epoch_s = max((tb - ta) / job["timing_epochs"], 1e-6)  # t = a + b * epochs: a = the per-call cost
    fixed_s = max(ta - 5 * epoch_s, 0.0)
    observed = []  # the runs' own pace: (seconds - a) / epochs, as the bench's Pace does for QQA and SA
    for budget in job["budgets"]:
        for seed in job["seeds"]:
            rate = sum(observed) / len(observed) if observed else epoch_s
            epochs = max(int((budget - fixed_s) / rate), 2)
            t0 = time.perf_counter()
            sol, energy, done = run(spec, epochs, seed, 1.5 * budget)
            seconds = time.perf_counter() - t0
            if seconds > fixed_s and done:
                observed.append((seconds - fixed_s) / done)
            out.append({"profile": spec["name"], "budget": budget, "seed": seed, "epochs": epochs,
                        "completed_epochs": done, "epoch_s": epoch_s, "fixed_s": fixed_s, "seconds": seconds,
                        "reported_energy": energy, "solution": sol})
print("RESULT" + json.dumps({"version": qqa.__version__, "runs": out}))
"""


def official_python() -> Path | None:
    """This interpreter when the official package (PyPI ``qqa``) is importable here, else ``None``."""
    import importlib.util
    import sys

    return Path(sys.executable) if importlib.util.find_spec("qqa") is not None else None


def official_runs(
    problem: MaxCut,
    python: Path,
    budgets: list[float],
    seeds: list[int],
    profiles: dict[str, dict[str, Any]] | None = None,
    timing_epochs: int = 40,
) -> tuple[str, list[dict[str, Any]]]:
    """The official implementation (PyPI ``qqa``, torch) on the same instance, budgets and seeds, in a subprocess
    of the interpreter ``python``, one torch thread: each named profile of :data:`OFFICIAL_PROFILES` (default: its
    ``qqa.solve`` default, ``balanced``) with ``polish=False`` (the bench polishes every method's answer the same
    way). Equal wall time: after a warm-up call, two timed calls of 5 and ``5 + timing_epochs`` epochs fit
    ``t = a + b·epochs`` (``a``: its per-call cost); the first run gets ``(budget − a) / b`` epochs, every later one
    ``(budget − a) / b'`` with ``b'`` the mean pace of the runs so far (as :class:`Pace`), with a time limit of
    1.5 × budget as a guard.

    Returns:
        (qqa version, :func:`parse_official` of its runs).

    Raises:
        RuntimeError: the subprocess failed (its last stderr lines are in the message).
    """
    import json
    import subprocess

    profiles = {"balanced": OFFICIAL_PROFILES["balanced"]} if profiles is None else profiles
    job = {
        "n": problem.num_nodes,
        "u": problem.edge_u.tolist(),
        "v": problem.edge_v.tolist(),
        "w": problem.edge_w.tolist(),
        "budgets": list(budgets),
        "seeds": list(seeds),
        "profiles": [{"name": k, **v} for k, v in profiles.items()],
        "timing_epochs": timing_epochs,
    }
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run(
        [str(python), "-c", _OFFICIAL_DRIVER], input=json.dumps(job), capture_output=True, text=True, env=env,
        timeout=120 + len(profiles) * (60 + 3 * sum(budgets) * len(seeds)),
    )  # fmt: skip
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
    if proc.returncode != 0 or line is None:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"official qqa run failed (exit {proc.returncode}): {tail}")
    data = json.loads(line[len("RESULT") :])
    return data["version"], parse_official(problem, data["runs"])


def parse_official(problem: MaxCut, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The official runs as the bench scores them: ``cut`` recomputed here from the returned assignment
    (``problem.objective``; the peer's own reported energy is kept as ``reported_cut`` = −energy, for the record,
    never used), ``polished_cut`` after the bench's 1-flip polish, plus ``profile``, ``budget``, ``seed``,
    ``epochs``, ``epoch_s`` and ``seconds``.

    Raises:
        ValueError: an assignment of the wrong length or with values other than 0 and 1.
    """
    out = []
    for r in runs:
        solution = np.asarray(r["solution"], dtype=np.int64)
        if solution.shape != (problem.num_nodes,) or not np.isin(solution, (0, 1)).all():
            raise ValueError(
                f"official qqa returned an assignment of shape {solution.shape} with values "
                f"{sorted(set(solution.ravel().tolist()))[:5]}; expected {problem.num_nodes} values in {{0, 1}}"
            )
        reported = r.get("reported_energy")
        out.append(
            {
                "profile": r.get("profile", "balanced"),
                "budget": r["budget"],
                "seed": r["seed"],
                "cut": problem.objective(solution),
                "reported_cut": None if reported is None else -float(reported),
                "polished_cut": problem.objective(problem.local_search(solution)),
                "seconds": r["seconds"],
                "epochs": r["epochs"],
                "completed_epochs": r.get("completed_epochs"),
                "epoch_s": r.get("epoch_s"),
                "fixed_s": r.get("fixed_s"),
            }
        )
    return out
