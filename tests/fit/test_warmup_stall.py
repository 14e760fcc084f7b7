"""A network whose output goes through softplus, killed by the first AdamW steps (the 2-pendulum HNN's failure in
miniature): without a warm-up the fit ends worse than it started and says so; `--warmup` trains it."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from fit_helpers import cli  # noqa: E402

from pdsl.fit.run import training_stall  # noqa: E402

TRUTH = """
model Decay "x' = -k(x) x"
  param k0 = 0.8
  var x = 1
  der(x) = -(k0 + 0.3*sin(x))*x
end
"""
LEARNED = """
model DecayNet "x' = -softplus(N(x)) x: the rate through a saturating output"
  nn N: mlp(hidden = [16], act = tanh)
  var x = 1
  der(x) = -log(1 + exp(N(x)))*x
end
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("stall")
    (d / "truth.phm").write_text(TRUTH)
    (d / "learn.phm").write_text(LEARNED)
    assert cli("simulate", d / "truth.phm", "--t-end", 2, "--dt", 0.1, "--random-init", 20, "--sample",
               "x = uniform(-3, 3)", "--seed", 1, "-o", d / "d.csv") == 0
    return d


def _fit(d, out, *extra):
    return cli("fit", d / "learn.phm", "--data", d / "d.csv", "-o", out, "--epochs", 100, "--lr", 1, "--chunk", 4,
               "--val-fraction", 0, "--no-plots", *extra)


def test_dead_softplus_is_reported_and_warmup_trains_it(files, tmp_path, capsys):
    assert _fit(files, tmp_path / "plain") == 0
    text = capsys.readouterr().out
    h = np.genfromtxt(tmp_path / "plain" / "history.csv", delimiter=",", names=True)["train"]
    assert h[-1] > h[0]  # the output died: the rate is ~0 and the loss is worse than at the start
    assert "the networks may not have trained" in text and "--warmup" in text
    assert "may not have trained" in (tmp_path / "plain" / "report.md").read_text()

    assert _fit(files, tmp_path / "warm", "--warmup", 20) == 0
    text = capsys.readouterr().out
    h = np.genfromtxt(tmp_path / "warm" / "history.csv", delimiter=",", names=True)["train"]
    assert h[-1] < 0.2 * h[0], (h[0], h[-1])
    assert "may not have trained" not in text
    assert "lr 1 (cosine, warm-up over 20 epochs)" in (tmp_path / "warm" / "report.md").read_text()


def test_training_stall_thresholds():
    healthy = list(np.geomspace(0.5, 0.002, 60))  # the studies' healthy fits end 1e-3–1e-2 of their first loss
    assert training_stall(healthy) is None
    assert training_stall([0.49, *np.linspace(0.3, 0.094, 59)]) == pytest.approx((0.49, 0.094))  # the HNN's 0.19
    assert training_stall([0.49] * 10) is None  # too short to say
    assert training_stall([float("nan")] * 60) is None
