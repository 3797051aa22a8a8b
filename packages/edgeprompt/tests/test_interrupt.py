"""Ctrl-C under the CLI: one that a library swallows still stops pre-training and tuning at the next epoch, with one
line on stderr, exit 130 and nothing written (issue 37)."""

from __future__ import annotations

import gc
import os
import signal
import sys
import time

import pytest

from iclr25_edgeprompt import _experiment
from iclr25_edgeprompt._tuner import PromptTuner
from iclr25_edgeprompt.cli import main


def _swallow_a_ctrl_c() -> None:
    """What a library's garbage-collection callback (JAX's ``_xla_gc_callback``) does to a Ctrl-C that lands in it:
    the KeyboardInterrupt raised inside the callback never reaches the caller."""
    fired: list[bool] = []

    def callback(phase: str, info: dict) -> None:
        if phase == "start" and not fired:
            fired.append(True)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the runner's handler raises here, inside the callback

    gc.callbacks.append(callback)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(callback)


@pytest.mark.parametrize("stage", ["pretrain", "tune"])
def test_a_swallowed_ctrl_c_stops_the_next_epoch(tmp_path, monkeypatch, capsys, stage):
    epochs: list[int] = []

    def swallowing(train):  # train(..., callback=the command's) with a Ctrl-C swallowed after epoch 2
        def wrapped(*args, callback=None, **kwargs):
            def cb(epoch, loss):
                epochs.append(epoch)
                if len(epochs) == 2:
                    _swallow_a_ctrl_c()
                if callback is not None:
                    callback(epoch, loss)

            return train(*args, callback=cb, **kwargs)

        return wrapped

    if stage == "pretrain":
        monkeypatch.setattr(_experiment, "pretrain", swallowing(_experiment.pretrain))
    else:
        monkeypatch.setattr(PromptTuner, "fit", swallowing(PromptTuner.fit))
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: None)  # the simulated library's own report
    out = tmp_path / "run"
    argv = ["tune", "--pretrain-epochs", "30", "--epochs", "30", "--hidden-channels", "8", "--quiet"]
    assert main([*argv, "--out", str(out)]) == 130
    assert capsys.readouterr().err.strip() == "iclr25-edgeprompt tune: interrupted; no results were written"
    assert len(epochs) == 2, f"{stage} went on for {len(epochs) - 2} epochs after the Ctrl-C"
    assert not out.exists() and not list(tmp_path.iterdir())
