import numpy as np
import pytest

from iclr25_videophy import write_video


@pytest.fixture
def numbered_video(tmp_path):
    """A 30-frame 32x48 video whose frame t is a flat grey of level 8*t (so decoded frames reveal their index)."""

    def make(n=30, name="numbered.mp4", folder=None):
        frames = np.stack([np.full((32, 48, 3), 8 * t, np.uint8) for t in range(n)])
        return write_video((folder or tmp_path) / name, frames, fps=10)

    return make
