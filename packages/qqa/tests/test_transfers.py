"""The annealing loop makes no implicit host-device transfer per chunk (issue 40: nothing host-bound in the hot loop).

``jax.transfer_guard("log")`` logs every implicit transfer (numpy arguments to a compiled call, ``np.asarray`` of a
device array) to stderr. The setup of a run may transfer (the key, the problem's arrays); the loop over chunks must
not, so a run of 6 chunks logs exactly as many transfers as a run of 2. Before the fix every chunk passed its step
indices, γ values and padding mask as numpy arrays (3 host-to-device copies) and read the best replica back with
``np.asarray`` (1 device-to-host copy).
"""

from __future__ import annotations

import jax
import networkx as nx

from iclr25_qqa import MaxCut, anneal


def _logged_transfers(capfd, problem, steps: int) -> int:
    capfd.readouterr()
    with jax.transfer_guard("log"):
        anneal(problem, key=0, replicas=8, steps=steps, chunk=10)
    return capfd.readouterr().err.count("transfer:")


def test_transfers_do_not_grow_with_chunks(capfd):
    problem = MaxCut(nx.random_regular_graph(3, 40, seed=0))
    anneal(problem, key=0, replicas=8, steps=20, chunk=10)  # compile outside the count
    two = _logged_transfers(capfd, problem, 20)
    six = _logged_transfers(capfd, problem, 60)
    assert two > 0, "the guard logged nothing: the count cannot see transfers (log format changed?)"
    assert six == two, f"{six - two} implicit transfers in 4 extra chunks (2 chunks: {two}, 6 chunks: {six})"
