"""``reproduce``'s bookkeeping: the held-out split, undefined scores as null with a reason, the comparisons' call
site, and (end to end, tiny) every LDS and the primary difference recomputed from the saved results file alone."""

import itertools
import json
import math

import numpy as np
import pytest
from scipy.stats import spearmanr

from iclr25_diffusion_shapley import _reproduce as rp


def test_coalition_keys_round_trip():
    for n in (1, 3, 5):
        for bits in itertools.product([False, True], repeat=n):
            mask = np.array(bits)
            assert np.array_equal(rp.coalition_mask(rp.coalition_key(mask), n), mask)
    assert rp.coalition_key(np.zeros(3, bool)) == "{}"
    assert rp.coalition_key(np.array([True, False, True])) == "{0,2}"


def test_heldout_coalitions_leave_out_every_fitted_coalition():
    fitted = np.array([[True, False, False, False], [False, True, True, False], [True, True, True, False]])
    held = rp.heldout_coalitions(4, fitted)
    # sizes 1 and 2 only (0 and 4 are every KernelSHAP row's, 3 is leave-one-out's), minus {0} and {1,2}
    assert [rp.coalition_key(m) for m in held] == [
        "{1}",
        "{0,1}",
        "{2}",
        "{0,2}",
        "{3}",
        "{0,3}",
        "{1,3}",
        "{2,3}",
    ]


def test_an_undefined_score_is_null_with_a_reason_never_nan():
    masks = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=bool)  # one size: equal scores give equal sums
    res = rp.score(np.ones(3), None, masks, np.array([0.1, 0.5, 0.2]))
    assert res["lds_x100"] is None and "constant" in res["lds_reason"]
    assert res["spearman_vs_exact"] is None and res["spearman_reason"]
    json.dumps(res, allow_nan=False)  # raises on NaN / inf
    ok = rp.score(np.array([3.0, 1.0, 2.0]), np.array([0.3, 0.1, 0.2]), masks, np.array([0.9, 0.1, 0.5]))
    assert ok["lds_x100"] == pytest.approx(100.0) and ok["spearman_vs_exact"] == pytest.approx(1.0)
    assert ok["lds_reason"] is None


def _rows(lds_by_method):
    return [
        {"seed": s, "property": "share:0", "method": m, "lds_x100": v, "spearman_vs_exact": None}
        for m, vals in lds_by_method.items()
        for s, v in enumerate(vals)
    ]


def test_comparisons_declare_one_primary_sparse_ft_minus_unlearning_and_drop_undefined_seeds():
    sft = [80.0, 70.0, 90.0, 60.0, None]
    vals = {
        rp.SFT: sft,
        rp.UNLEARN: [70.0, 72.0, 60.0, 50.0, 40.0],
        rp.SIZE: [10.0, 20.0, 30.0, 40.0, 50.0],
        rp.PIXEL: [0.0, 0.0, 10.0, 20.0, 30.0],
        rp.LOO: [50.0, 40.0, 30.0, 20.0, 10.0],
        rp.RETRAIN_M: [80.0, 80.0, 80.0, 70.0, 60.0],
    }
    comps, notes = rp.comparisons(_rows(vals), ("share:0",))
    rows = [c.as_dict() for c in comps]
    assert [r["role"] for r in rows] == ["primary"] + ["secondary"] * 4
    assert "sparse-FT - unlearn-GA" in rows[0]["name"]
    # seed 4 has no sparse-FT LDS: the pairs are seeds 0-3, differences 10, -2, 30, 10
    assert rows[0]["n"] == 4 and rows[0]["mean_difference"] == pytest.approx(12.0)
    assert rows[1]["p_adjusted"] is not None and rows[0]["p_adjusted"] is None
    assert any("seeds [4] dropped" in n for n in notes)


@pytest.mark.slow
def test_every_lds_and_the_primary_are_recomputed_from_the_saved_file(tmp_path):
    from iclr25_diffusion_shapley.cli import main
    from iclr25_shared.data import fashion_mnist
    from iclr25_shared.testing import require

    require(fashion_mnist, "test")
    tiny = "--per-class 20 --classifier-images 200 --hidden 32 --batch-size 16 --retrain-steps 30 --prune-steps 5"
    tiny += " --ft-steps 5 --unlearn-steps 2 --num-samples 64 --sampling-steps 4 --kernel-samples 4 --quiet"
    out = tmp_path / "repro"
    argv = [
        "reproduce",
        "--contributors",
        "0",
        "1",
        "2",
        "7",
        "--seeds",
        "2",
        "--properties",
        "share:0",
        "entropy",
    ]
    assert main([*argv, *tiny.split(), "--out", str(out)]) == 0
    text = (out / "results.json").read_text()
    assert "NaN" not in text and '"nan"' not in text
    res = json.loads(text)
    v, per_seed = res["tables"]["v(S)"], res["tables"]["per_seed"]
    n, checked = 4, 0
    for seed in (0, 1):
        fit = {r["coalition"] for r in v if r["seed"] == seed and r["strategy"] == "sparse-ft"}
        held = [r for r in v if r["seed"] == seed and r["set"] == "held-out"]
        assert held and not fit & {r["coalition"] for r in held}  # no KernelSHAP row was fitted on them
        for r in held:
            size = len(rp.coalition_mask(r["coalition"], n).nonzero()[0])
            assert 0 < size < n - 1 and r["training_seed"] != seed
        masks = np.array([rp.coalition_mask(r["coalition"], n) for r in held])
        retrain = {
            r["coalition"]: r
            for r in v
            if r["seed"] == seed and r["set"] == "fit" and r["strategy"] == "retrain"
        }
        assert len(retrain) == 2**n
        for prop in ("share:0", "entropy"):
            # exact Shapley from the saved retrained table, by the permutation formula
            exact = np.zeros(n)
            for perm in itertools.permutations(range(n)):
                have: list[int] = []
                for i in perm:
                    before = retrain["{" + ",".join(map(str, sorted(have))) + "}"][prop]
                    have.append(i)
                    exact[i] += retrain["{" + ",".join(map(str, sorted(have))) + "}"][prop] - before
            exact /= math.factorial(n)
            rows = {r["method"]: r for r in per_seed if r["seed"] == seed and r["property"] == prop}
            np.testing.assert_allclose(rows[rp.EXACT]["phi"], exact, atol=1e-12)
            values = np.array([r[prop] for r in held])
            for method, row in rows.items():
                pred = masks @ np.array(row["phi"])
                if row["lds_x100"] is None:
                    assert row["lds_reason"]
                    continue
                rho = spearmanr(pred, values).statistic
                assert row["lds_x100"] == pytest.approx(100 * rho, abs=1e-9), (seed, prop, method)
                checked += 1
    assert checked > 0
    primary = [c for c in res["tables"]["comparisons"] if c["role"] == "primary"]
    assert len(primary) == 1 and res["tables"]["comparisons"][0] is primary[0]
    prop = res["metrics"]["primary_property"]

    def lds(method):
        return {r["seed"]: r["lds_x100"] for r in per_seed if r["property"] == prop and r["method"] == method}

    a, b = lds(rp.SFT), lds(rp.UNLEARN)
    diffs = [a[s] - b[s] for s in a if a[s] is not None and b[s] is not None]
    assert primary[0]["n"] == len(diffs)
    if diffs:
        assert primary[0]["mean_difference"] == pytest.approx(float(np.mean(diffs)))
    else:
        assert (
            primary[0]["mean_difference"] is None and "undefined on every seed" in res["metrics"]["verdict"]
        )
    assert res["metrics"]["verdict"]
