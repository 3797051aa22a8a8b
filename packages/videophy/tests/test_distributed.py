"""Issue 39: generation and judging of prompts x videos are a job farm over the ranks of a torch.distributed group
(torchrun / accelerate launch); two CPU processes (gloo) write the one-process videos and mapping and give the
one-process scores bit for bit, a failure on one rank stops every rank with one error, and a killed distributed run
resumes from the rank files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from iclr25_shared.testing import RankFailed, run_ranks

PROMPTS = [
    "A ball falls and bounces.",
    "Water pours into a cup.",
    "A rubber ball rolls down a ramp.",
    'A "heavy" box slides; it stops.',
    "Sand flows through an hourglass.",
]


class _Frames:
    """A deterministic text-to-video stand-in: moving noise from the seed; fails on ``fail_on`` if given."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.fail_on, self.calls = fail_on, []

    def __call__(self, prompt: str, seed: int) -> np.ndarray:
        from iclr25_shared.distributed import world

        if prompt == self.fail_on and world().rank == 1:  # rank 1 only: its video of that prompt fails
            raise RuntimeError(f"the model failed on {prompt!r}")
        self.calls.append(prompt)
        rng = np.random.default_rng(seed)
        base = rng.integers(0, 200, (16, 16, 3))
        return np.stack([np.roll(base, t, axis=1) for t in range(6)]).astype(np.uint8)


def _generate_and_judge(out: str, fail_on: str | None = None) -> dict:
    from iclr25_shared.distributed import world
    from iclr25_videophy import Prompt, TemporalCoherence, evaluate_videos, generate

    entries = generate(_Frames(fail_on), [Prompt(p) for p in PROMPTS], out, videos_per_prompt=2, seed=3)
    judged = evaluate_videos(entries, sa=None, pc=TemporalCoherence(num_frames=6, size=(16, 16)))
    return {
        "rank": world().rank,
        "entries": [(Path(v).name, p.caption, s) for v, p, s in entries],
        "pc": [j.pc for j in judged],
    }


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


@pytest.mark.slow  # two fresh processes import torch: ~1 min on the shared 2-core machine
def test_two_ranks_write_the_one_process_videos_mapping_and_scores(tmp_path):
    one = _generate_and_judge(str(tmp_path / "one"))
    two = run_ranks(_generate_and_judge, str(tmp_path / "two"), world_size=2, timeout_s=180)
    for r in two:  # every rank returns every entry and score, equal to one process to the last bit
        assert r["entries"] == one["entries"] and len(r["entries"]) == 10
        assert np.array_equal(np.array(r["pc"]), np.array(one["pc"]))
    assert len(set(one["pc"])) > 1
    files_one, files_two = _files(tmp_path / "one"), _files(tmp_path / "two")
    assert files_one.keys() == files_two.keys() and "mapping.csv" in files_one  # no rank file left behind
    assert files_one == files_two  # the videos and mapping.csv, byte for byte


@pytest.mark.slow
def test_a_failure_on_one_rank_stops_every_rank_and_the_run_resumes_from_the_rank_files(tmp_path):
    from iclr25_videophy import Prompt, generate

    out = tmp_path / "two"
    # jobs: (prompt 0, k 0), (prompt 0, k 1), (prompt 1, k 0), ...; job 9 (the last prompt's second video) is rank
    # 1's last: it fails after writing its other four videos; rank 0 writes its five and waits in the gather until
    # the harness stops it (as torchrun does)
    with pytest.raises(RankFailed) as info:
        run_ranks(_generate_and_judge, str(out), PROMPTS[-1], world_size=2, timeout_s=180)
    assert info.value.rank == 1
    assert "the model failed on 'Sand flows through an hourglass.'" in info.value.message
    assert not (out / "mapping.csv").exists()
    assert sorted(p.name for p in out.glob("mapping.rank*.csv")) == ["mapping.rank0.csv", "mapping.rank1.csv"]
    # resume in one process: the nine videos the ranks recorded are not generated again
    gen = _Frames()
    entries = generate(gen, [Prompt(p) for p in PROMPTS], out, videos_per_prompt=2, seed=3)
    assert len(entries) == 10 and gen.calls == [PROMPTS[-1]]
    assert not list(out.glob("mapping.rank*.csv"))
    ref = tmp_path / "ref"
    generate(_Frames(), [Prompt(p) for p in PROMPTS], ref, videos_per_prompt=2, seed=3)
    assert _files(out) == _files(ref)
