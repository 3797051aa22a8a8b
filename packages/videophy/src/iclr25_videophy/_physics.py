"""A physics-plausibility evaluator trained here, on rendered clips of a falling, bouncing ball.

VideoPhy finds that generated videos most often break conservation laws (mass, momentum/energy) and gravity
(arXiv:2406.03520, qualitative analysis of the human evaluation). Its judge cannot be run offline, so this module builds a
small, checkable stand-in: clips whose ground truth is known by construction.

- :func:`render_clip` draws a ball under gravity with inelastic bounces (``physical``), or one of four violations:
  ``upward`` (acceleration points up), ``energy_gain`` (restitution > 1: the ball bounces higher than it fell),
  ``size_drift`` (the radius changes over time: mass not conserved) and ``teleport`` (a jump in position).
- :func:`trajectory_features` tracks the ball from the pixels only (intensity-weighted centroid and mass per frame)
  and turns the track into gravity, jerk, mass-drift and energy features; :func:`frame_difference_features` is the
  pixel-statistics baseline that sees no trajectory.
- :class:`PhysicsPlausibility` is a standardised logistic regression on either feature set whose score is
  ``P(physical)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from iclr25_shared.checks import check_choice, check_float, check_int
from iclr25_videophy._evaluators import FrameEvaluator

__all__ = [
    "CLIP_KINDS",
    "VIOLATIONS",
    "PhysicsPlausibility",
    "frame_difference_features",
    "held_out_split",
    "make_dataset",
    "render_clip",
    "trajectory_features",
]

VIOLATIONS = ("upward", "energy_gain", "size_drift", "teleport")
CLIP_KINDS = ("physical", *VIOLATIONS)
FEATURE_SETS = ("trajectory", "framediff")


def _simulate(
    kind: str, rng: np.random.Generator, frames: int, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Centre (row, col) and radius per frame, in pixels (row grows downwards)."""
    floor = size - 2.0
    r0 = rng.uniform(2.5, 4.0)
    g = rng.uniform(0.15, 0.35)  # px / frame^2, downwards
    e = rng.uniform(0.5, 0.85)  # restitution
    t_bounce = rng.uniform(4.0, 10.0)
    h0 = 0.5 * g * t_bounce**2  # dropped from rest: first bounce at t_bounce
    h0 = min(h0, floor - 2 * r0 - 1.0)
    vy = 0.0
    if kind == "upward":
        g = -rng.uniform(0.03, 0.1)
        h0 = rng.uniform(0.0, 4.0)
        vy = rng.uniform(0.0, 0.6)  # starts moving down, accelerates upwards
    if kind == "energy_gain":
        e = rng.uniform(1.05, 1.3)
    x = rng.uniform(0.3, 0.7) * size
    vx = rng.uniform(-0.6, 0.6)
    y = floor - r0 - h0
    sub = 20
    dt = 1.0 / sub
    ys, xs = [y], [x]
    for _ in range(frames - 1):
        for _ in range(sub):
            vy += g * dt
            y += vy * dt
            x += vx * dt
            if y > floor - r0 and vy > 0:  # bounce on the floor
                y = 2 * (floor - r0) - y
                vy = -e * vy
        ys.append(y)
        xs.append(x)
    cy, cx = np.array(ys), np.array(xs)
    radius = np.full(frames, r0)
    t = np.arange(frames) / (frames - 1)
    if kind == "size_drift":
        delta = rng.uniform(0.1, 0.3) * rng.choice([-1.0, 1.0])
        radius = r0 * (1.0 + delta * t)
    if kind == "teleport":
        k = int(rng.integers(3, frames - 3))
        angle = rng.uniform(0, 2 * np.pi)
        dist = rng.uniform(2.0, 5.0)
        cy[k:] += dist * np.sin(angle)
        cx[k:] += dist * np.cos(angle)
    return cy, cx, radius


def render_clip(
    kind: str, rng: np.random.Generator | int, *, frames: int = 16, size: int = 32, noise: float = 0.08
) -> np.ndarray:
    """Render one clip of a ball (``physical`` or one of :data:`VIOLATIONS`).

    Args:
        kind: one of :data:`CLIP_KINDS`.
        rng: a numpy Generator or a seed.
        frames: clip length ``>= 8``; size: frame side ``>= 16`` pixels.
        noise: standard deviation of the added Gaussian pixel noise (``>= 0``).

    Returns:
        ``(frames, size, size)`` float32 grey levels in ``[0, 1]`` (anti-aliased disc on a random background).

    Raises:
        ValueError: unknown kind or out-of-range sizes.
    """
    check_choice("kind", kind, CLIP_KINDS)
    frames = check_int("frames", frames, low=8)
    size = check_int("size", size, low=16)
    check_float("noise", noise, low=0.0)
    rng = np.random.default_rng(rng)
    cy, cx, radius = _simulate(kind, rng, frames, size)
    bg = rng.uniform(0.0, 0.3)
    fg = bg + rng.uniform(0.5, 0.7)
    rows, cols = np.mgrid[0:size, 0:size].astype(np.float64) + 0.5
    out = np.empty((frames, size, size), np.float32)
    for t in range(frames):
        dist = np.hypot(rows - cy[t], cols - cx[t])
        cover = np.clip(radius[t] + 0.5 - dist, 0.0, 1.0)
        out[t] = bg + (fg - bg) * cover
    out += rng.normal(0.0, noise, out.shape).astype(np.float32)
    return np.clip(out, 0.0, 1.0)


def _grey(frames: Any) -> np.ndarray:
    arr = np.asarray(frames)
    if arr.ndim == 4 and arr.shape[-1] == 3:
        arr = arr.mean(axis=-1)
    if arr.ndim != 3 or arr.shape[0] < 4:
        raise ValueError(
            f"frames must have shape (T, H, W) or (T, H, W, 3) with T >= 4, got {np.asarray(frames).shape}"
        )
    arr = arr.astype(np.float64)
    if np.asarray(frames).dtype == np.uint8:
        arr /= 255.0
    if not np.isfinite(arr).all():
        raise ValueError("frames hold NaN or inf")
    return arr


def _slope(y: np.ndarray) -> float:
    t = np.arange(y.size, dtype=np.float64)
    t -= t.mean()
    return float((t * (y - y.mean())).sum() / (t * t).sum())


def trajectory_features(frames: Any) -> np.ndarray:
    """Features of the tracked object: gravity, jerk, mass drift and energy change (10 values).

    The object is the intensity above the frame's median (minus a noise margin); per frame its mass is the summed
    excess intensity and its position the excess-weighted centroid. Frames where nothing is visible reuse the last
    position.

    Args:
        frames: ``(T, H, W)`` grey or ``(T, H, W, 3)`` RGB, float in [0, 1] or uint8; ``T >= 4``.

    Returns:
        ``(10,)`` float64: median and mean vertical acceleration (px/frame², down positive), the largest
        acceleration spike over its median (jerk ratio), the largest horizontal acceleration, the slope and log-range
        of the log mass, the relative change of mechanical energy (last third vs first third) and its largest
        single-frame increase, the fraction of frames with upward acceleration, and the mean speed.
    """
    f = _grey(frames)
    t_len = f.shape[0]
    rows, cols = np.mgrid[0 : f.shape[1], 0 : f.shape[2]].astype(np.float64)
    mass = np.zeros(t_len)
    cy = np.zeros(t_len)
    cx = np.zeros(t_len)
    for t in range(t_len):
        w = np.clip(f[t] - np.median(f[t]) - 0.15, 0.0, None)
        m = w.sum()
        mass[t] = m
        if m > 1e-6:
            cy[t] = (w * rows).sum() / m
            cx[t] = (w * cols).sum() / m
        else:
            cy[t] = cy[t - 1] if t else f.shape[1] / 2
            cx[t] = cx[t - 1] if t else f.shape[2] / 2
    vy, vx = np.diff(cy), np.diff(cx)
    ay, ax = np.diff(vy), np.diff(vx)
    acc = np.hypot(ay, ax)
    jerk_ratio = acc.max() / (np.median(acc) + 0.05)
    logm = np.log(mass + 1e-3)
    g_hat = max(abs(float(np.median(ay))), 1e-3)
    height = cy.max() - cy  # above the lowest point seen
    speed2 = vy**2 + vx**2
    energy = g_hat * 0.5 * (height[1:] + height[:-1]) + 0.5 * speed2
    third = max(1, energy.size // 3)
    e0 = energy[:third].mean()
    e_change = (energy[-third:].mean() - e0) / (e0 + 1.0)
    return np.array(
        [
            np.median(ay),
            ay.mean(),
            jerk_ratio,
            np.abs(ax).max(),
            _slope(logm),
            logm.max() - logm.min(),
            e_change,
            np.diff(energy).max() / (e0 + 1.0),
            float((ay < 0).mean()),
            np.sqrt(speed2).mean(),
        ]
    )


def frame_difference_features(frames: Any) -> np.ndarray:
    """Pixel statistics without tracking (the baseline): mean, std, max, min and slope of the per-frame mean absolute
    difference, and the slope of the mean intensity (6 values)."""
    f = _grey(frames)
    d = np.abs(np.diff(f, axis=0)).mean(axis=(1, 2))
    return np.array([d.mean(), d.std(), d.max(), d.min(), _slope(d), _slope(f.mean(axis=(1, 2)))])


_FEATURES = {"trajectory": trajectory_features, "framediff": frame_difference_features}


def make_dataset(
    n_per_kind: int, seed: int, *, frames: int = 16, size: int = 32, noise: float = 0.08
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A balanced set: ``4 * n_per_kind`` physical clips and ``n_per_kind`` of each violation.

    Returns:
        ``clips (N, frames, size, size)`` float32, ``labels (N,)`` int64 (1 = physical), ``kinds (N,)`` str.
    """
    n_per_kind = check_int("n_per_kind", n_per_kind, low=1)
    rng = np.random.default_rng(seed)
    kinds = ["physical"] * (len(VIOLATIONS) * n_per_kind) + [v for v in VIOLATIONS for _ in range(n_per_kind)]
    clips = np.stack([render_clip(k, rng, frames=frames, size=size, noise=noise) for k in kinds])
    kinds_arr = np.array(kinds)
    return clips, (kinds_arr == "physical").astype(np.int64), kinds_arr


def held_out_split(train_kinds: Any, test_kinds: Any, held_out: str) -> tuple[np.ndarray, np.ndarray]:
    """Leave one violation kind out: which training clips to fit on and which test clips to score.

    Training keeps the ``physical`` clips and the violations other than ``held_out``; the test set is the
    ``physical`` test clips against the ``held_out`` ones. Every other kind is dropped from the test set, so the
    AUC measures whether the evaluator flags a violation it never saw.

    Args:
        train_kinds, test_kinds: ``(N,)`` kind names (as :func:`make_dataset` returns them).
        held_out: one of :data:`VIOLATIONS`.

    Returns:
        Boolean masks ``(train_mask, test_mask)`` over the training and the test clips.

    Raises:
        ValueError: ``held_out`` is not a violation, or a side lacks physical clips or (the test side) the held-out
            kind, or no other violation is left to train on.
    """
    check_choice("held_out", held_out, VIOLATIONS)
    k_tr, k_te = np.asarray(train_kinds).astype(str), np.asarray(test_kinds).astype(str)
    train = k_tr != held_out
    test = (k_te == "physical") | (k_te == held_out)
    if not (k_tr[train] == "physical").any() or (k_tr[train] == "physical").all():
        raise ValueError(f"holding out {held_out!r} leaves no physical or no violating training clip")
    if not (k_te == "physical").any() or not (k_te == held_out).any():
        raise ValueError(f"the test set needs physical and {held_out!r} clips")
    return train, test


class PhysicsPlausibility(FrameEvaluator):
    """Logistic regression on clip features; ``score`` = P(physical) in [0, 1].

    Args:
        features: ``trajectory`` (:func:`trajectory_features`) or ``framediff`` (:func:`frame_difference_features`).
        C: inverse L2 strength of the logistic regression (> 0).
        num_frames: frames sampled per video when scoring files; files are decoded at 32x32 (the rendering size).
    """

    tasks = ("pc",)

    def __init__(self, features: str = "trajectory", *, C: float = 1.0, num_frames: int = 16) -> None:
        self.features = check_choice("features", features, FEATURE_SETS)
        self.C = check_float("C", C, low=0.0, low_inclusive=False)
        self.num_frames = check_int("num_frames", num_frames, low=4)
        self.size = (32, 32)
        self.model: Any = None
        self.name = f"physics-plausibility[{features}]"

    def featurize(self, clips: Sequence[Any]) -> np.ndarray:
        """``(N, F)`` features of ``N`` clips."""
        fn = _FEATURES[self.features]
        return np.stack([fn(c) for c in clips])

    def fit(self, clips: Sequence[Any], labels: Any) -> PhysicsPlausibility:
        """Fit on clips with labels 1 = physical, 0 = violating (both classes needed)."""
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        y = np.asarray(labels)
        if len(clips) != y.shape[0]:
            raise ValueError(f"clips and labels differ in length: {len(clips)} vs {y.shape[0]}")
        if set(np.unique(y).tolist()) != {0, 1}:
            raise ValueError(
                f"labels must hold both 0 and 1 (1 = physical), got values {np.unique(y).tolist()}"
            )
        self.model = make_pipeline(StandardScaler(), LogisticRegression(C=self.C, max_iter=2000))
        self.model.fit(self.featurize(clips), y)
        return self

    def score_frames(self, frames: Any) -> float:
        """P(physical) of one clip ``(T, H, W[, 3])``."""
        return float(self.score_clips([frames])[0])

    def score_clips(self, clips: Sequence[Any]) -> np.ndarray:
        """``(N,)`` P(physical) of ``N`` clips.

        Raises:
            RuntimeError: called before :meth:`fit`.
        """
        if self.model is None:
            raise RuntimeError("PhysicsPlausibility.fit must be called before scoring")
        return self.model.predict_proba(self.featurize(clips))[:, 1]
