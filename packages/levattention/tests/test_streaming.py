"""Streaming universal set: superset of the offline U for any order, bounded workspace (arXiv:2410.05462, streaming)."""

from __future__ import annotations

import numpy as np
import pytest

from iclr25_levattention import StreamingUniversalSet, heavy_entries, tensor_dim, universal_set


def keys(n, d, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_t(2, size=(n, d))


@pytest.mark.parametrize("p", [2, 4])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stream_contains_offline_set_for_any_order_and_block_sizes(p, seed):
    rng = np.random.default_rng(100 + seed)
    K = keys(1500, 4, seed)
    eps = 0.03
    offline = set(universal_set(K, eps, p).tolist())
    assert offline  # the test needs a non-trivial U
    order = rng.permutation(len(K)) if seed else np.arange(len(K))
    stream = StreamingUniversalSet(4, eps, p, block_size=int(rng.integers(1, 200)))
    start = 0
    while start < len(K):
        size = int(rng.integers(1, 300))
        part = order[start : start + size]
        stream.update(K[part], part)
        start += size
    got = set(stream.indices.tolist())
    assert got >= offline
    # Once every key is seen the prefix scores are the offline scores, so the sets coincide.
    assert got == offline
    np.testing.assert_allclose(stream.keys, K[stream.indices])


def test_stream_is_a_superset_at_every_prefix():
    K = keys(800, 3, 7)
    stream = StreamingUniversalSet(3, 0.05, 2, block_size=50)
    for start in range(0, 800, 100):
        stream.update(K[start : start + 100])
        offline_prefix = set(universal_set(K[: start + 100], 0.05, 2).tolist())
        assert set(stream.indices.tolist()) >= offline_prefix


@pytest.mark.parametrize("p", [2, 4])
def test_workspace_is_bounded_independently_of_n(p):
    d, eps, block = 3, 0.05, 64
    dim = tensor_dim(d, p // 2)
    peaks, workspaces = [], []
    for n in (500, 20_000):
        stream = StreamingUniversalSet(d, eps, p, block_size=block)
        stream.update(keys(n, d, 3))
        assert stream.num_seen == n
        assert stream.peak_buffer_rows <= stream.capacity + block
        assert stream.capacity == int(dim / eps)
        assert len(stream.indices) <= stream.capacity
        # the buffer holds raw keys (d floats), not their D tensor features
        assert stream.keys.shape[1] == d
        assert stream.workspace_floats <= dim * dim + 2 * d * d + 3 * d + stream.capacity * (d + 2)
        peaks.append(stream.peak_buffer_rows)
        workspaces.append(stream.workspace_floats)
    # 40x more keys, same bound: the workspace does not grow with n.
    bound = dim * dim + 2 * d * d + 3 * d + (stream.capacity + block) * (d + 2)
    assert max(workspaces) <= bound <= stream.workspace_bound_floats
    assert max(peaks) <= stream.capacity + block


def test_peak_memory_of_a_pass_does_not_grow_with_n():
    """tracemalloc peak of feeding 2 000 vs 40 000 keys (p = 4) in blocks: the same, up to one block's arrays."""
    import tracemalloc

    peaks = []
    for n in (2_000, 40_000):
        K = keys(n, 4, 5)
        stream = StreamingUniversalSet(4, 0.1, 4, block_size=256)
        tracemalloc.start()
        for block in np.array_split(K, n // 256):
            stream.update(block)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert peaks[-1] <= 8 * stream.workspace_bound_floats + 2**20
    assert peaks[1] <= 1.5 * peaks[0] + 2**16


def test_stated_workspace_for_head_dim_64_p4():
    """Issue 14: the stream stored φ (D = 2 080 floats) per buffered key, ~0.7 GB at p = 4, d = 64, eps = 0.05; with
    raw keys buffered the whole bound is D² + (D/eps + block)(d + 2) + chunk·D floats, under 80 MiB."""
    stream = StreamingUniversalSet(64, 0.05, 4, block_size=1024)
    D = tensor_dim(64, 2)
    assert stream.capacity == 41_600
    expected = D * D + 2 * 64 * 64 + 3 * 64 + (41_600 + 1024) * 66 + 1024 * D
    assert stream.workspace_bound_floats == expected
    assert 8 * expected < 80 * 2**20


@pytest.mark.parametrize("p", [2, 4])
def test_stream_answers_heavy_entries_exactly(p):
    rng = np.random.default_rng(9)
    K = keys(1000, 4, 9)
    Q = rng.standard_normal((300, 4))
    stream = StreamingUniversalSet(4, 0.05, p, block_size=128)
    for start in range(0, 1000, 250):
        stream.update(K[start : start + 250])
    offline = heavy_entries(Q, K, 0.05, p)
    online = stream.heavy_entries(Q)
    assert online.pairs() == offline.pairs()
    np.testing.assert_allclose(online.normalizers, offline.normalizers, rtol=1e-10)


def test_bad_stream_input():
    with pytest.raises(ValueError, match="p must be a positive even integer"):
        StreamingUniversalSet(3, 0.1, 3)
    with pytest.raises(ValueError, match="eps"):
        StreamingUniversalSet(3, 0.0)
    with pytest.raises(ValueError, match=r"d must be an integer in \[1, inf\)"):
        StreamingUniversalSet(0, 0.1)
    stream = StreamingUniversalSet(3, 0.1)
    with pytest.raises(ValueError, match="no keys have been fed"):
        stream.heavy_entries(np.ones((2, 3)))
    with pytest.raises(ValueError, match="block has 2 columns but d = 3"):
        stream.update(np.ones((4, 2)))
    with pytest.raises(ValueError, match="NaN or inf"):
        stream.update(np.array([[1.0, np.nan, 0.0]]))
    with pytest.raises(ValueError, match="distinct"):
        stream.update(np.eye(3), [0, 0, 1])
    stream.update(np.eye(3), [5, 6, 7])
    with pytest.raises(ValueError, match="already"):
        stream.update(np.eye(3), [5, 8, 9])
    with pytest.raises(ValueError, match="Q has 2 columns"):
        stream.heavy_entries(np.ones((2, 2)))
