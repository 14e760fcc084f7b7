"""`pdsl fit` and `pdsl evaluate` from the command line: outputs, settings, resume, errors."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from fit_helpers import cli

from pdsl.fit.checkpoint import load_checkpoint
from pdsl.pipeline import load_models

REPO = Path(__file__).resolve().parents[2]


def fit(model, data, out, *extra):
    return cli("fit", model, "--data", data, "-o", out, "--quiet", *extra)


def test_fit_writes_every_output(tmp_path, spring_model, small_spring_data, capsys):
    out = tmp_path / "out"
    assert fit(spring_model, small_spring_data, out, "--free", "m1,m2", "--val-fraction", "0.25") == 0
    text = capsys.readouterr().out
    assert "m1 = 1.29" in text or "m1 = 1.30" in text  # chunk starts are estimated by default (issue 16)
    assert "m2 = 0.69" in text or "m2 = 0.70" in text
    for name in ("params.json", "report.md", "loss.png", "validation.png", "history.csv", "checkpoint.npz",
                 "spring_pendulum.fitted.phm"):
        assert (out / name).is_file(), name
    params = json.loads((out / "params.json").read_text())
    assert params["params"]["m1"]["free"] and not params["params"]["g"]["free"]
    assert params["values"]["m1"] == pytest.approx(1.3, rel=1e-3)
    fitted = {q.name: q.default for q in load_models(out / "spring_pendulum.fitted.phm")[0].params}
    assert fitted["m1"] == params["values"]["m1"] and fitted["g"] == 9.81
    report = (out / "report.md").read_text()
    assert "![loss curves](loss.png)" in report and "| `m1` |" in report
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporaries left


def test_evaluate_prints_a6_metrics(tmp_path, spring_model, small_spring_data, capsys):
    out = tmp_path / "out"
    assert fit(spring_model, small_spring_data, out, "--free", "m1,m2") == 0
    capsys.readouterr()
    js, png = tmp_path / "m.json", tmp_path / "err.png"
    assert cli("evaluate", spring_model, "--data", small_spring_data, "--params", out / "params.json",
               "--json", js, "--plot", png) == 0
    table = capsys.readouterr().out
    assert "relative error (geometric mean over t>0)" in table and "constraint RMS" in table
    fitted = json.loads(js.read_text())
    assert png.is_file()
    assert cli("evaluate", spring_model, "--data", small_spring_data, "--json", js) == 0  # start values m = 1, 1
    start = json.loads(js.read_text())
    key = "relative error (geometric mean over t>0)"
    assert fitted[key]["mean"] < 1e-2 * start[key]["mean"]
    assert fitted["energy error (mean over t)"]["mean"] < 1e-3


def test_config_file_and_flag_precedence(tmp_path, spring_model, small_spring_data):
    cfg = tmp_path / "fit.toml"
    cfg.write_text(f'data = "{os.path.relpath(small_spring_data, tmp_path)}"\nfree = ["m1", "m2"]\n'
                   'epochs = 1\nchunk = 5\nseed = 3\n[param]\nm1 = 1.25\n')
    out = tmp_path / "out"
    assert cli("fit", spring_model, "--config", cfg, "--chunk", "4", "-o", out, "--quiet") == 0
    p = json.loads((out / "params.json").read_text())
    assert p["epochs"] == 1 and p["settings"]["chunk"] == 4 and p["settings"]["seed"] == 3
    assert p["params"]["m1"]["start"] == 1.25


def test_config_errors_are_located(tmp_path, spring_model, capsys):
    cfg = tmp_path / "fit.toml"
    cfg.write_text('data = "x.csv"\nepoch = 3\n')
    assert cli("fit", spring_model, "--config", cfg, "-o", tmp_path / "o") == 2
    err = capsys.readouterr().err
    assert f"{cfg}:2:1: error[BadConfig]: unknown setting `epoch`" in err
    cfg.write_text('chunk = "four"\n')
    assert cli("fit", spring_model, "--config", cfg, "-o", tmp_path / "o") == 2
    assert "`chunk` must be an integer" in capsys.readouterr().err


def test_user_errors_exit_2_and_write_nothing(tmp_path, spring_model, small_spring_data, capsys):
    out = tmp_path / "out"
    assert fit(spring_model, small_spring_data, out, "--free", "mass") == 2
    assert "error[BadOption]: --free mass" in capsys.readouterr().err
    assert fit(spring_model, small_spring_data, out) == 2  # nothing free
    assert "NothingToFit" in capsys.readouterr().err
    assert fit(spring_model, tmp_path / "none.csv", out, "--free", "m1") == 2
    assert not out.exists()


def _same_outputs(a: Path, b: Path):
    pa, pb = json.loads((a / "params.json").read_text()), json.loads((b / "params.json").read_text())
    assert pa["values"] == pb["values"]
    assert pa["train_loss"] == pb["train_loss"] and pa["val_loss"] == pb["val_loss"]
    assert (a / "history.csv").read_text().splitlines() != []
    ha = np.loadtxt(a / "history.csv", delimiter=",", skiprows=1)[:, 1:3]
    hb = np.loadtxt(b / "history.csv", delimiter=",", skiprows=1)[:, 1:3]
    np.testing.assert_array_equal(ha, hb)
    if (a / "networks.npz").exists():
        with np.load(a / "networks.npz") as za, np.load(b / "networks.npz") as zb:
            assert set(za.files) == set(zb.files)
            for k in za.files:
                np.testing.assert_array_equal(za[k], zb[k])


def test_adamw_resume_equals_a_straight_run(tmp_path, nn_model, nn_data):
    """2 epochs, stop, --resume to 4 == 4 epochs straight (seeded, deterministic: bitwise equal)."""
    common = ["--epochs", "4", "--batch", "10", "--lr", "1e-2"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert fit(nn_model, nn_data, straight, *common) == 0
    assert fit(nn_model, nn_data, resumed, *common, "--stop-after", "2") == 0
    assert not (resumed / "params.json").exists()
    state, _ = load_checkpoint(resumed / "checkpoint.npz")
    assert state.epoch == 2 and state.arrays  # AdamW moments are in the checkpoint
    assert fit(nn_model, nn_data, resumed, *common, "--resume") == 0
    _same_outputs(straight, resumed)
    assert json.loads((straight / "params.json").read_text())["epochs"] == 4
    h = np.loadtxt(straight / "history.csv", delimiter=",", skiprows=1)
    assert h[-1, 1] < h[0, 1]  # AdamW does reduce the training loss


def test_gauss_newton_resume_equals_a_straight_run(tmp_path, spring_model, small_spring_data):
    common = ["--free", "m1,m2", "--tol", "0"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert fit(spring_model, small_spring_data, straight, *common, "--epochs", "4") == 0
    assert fit(spring_model, small_spring_data, resumed, *common, "--epochs", "2") == 0
    assert fit(spring_model, small_spring_data, resumed, *common, "--epochs", "4", "--resume") == 0
    _same_outputs(straight, resumed)


def test_resume_refuses_changed_settings(tmp_path, spring_model, small_spring_data, capsys):
    out = tmp_path / "out"
    assert fit(spring_model, small_spring_data, out, "--free", "m1,m2", "--epochs", "1") == 0
    assert fit(spring_model, small_spring_data, out, "--free", "m1,m2", "--chunk", "3", "--resume") == 2
    assert "BadResume" in capsys.readouterr().err
    assert fit(spring_model, small_spring_data, tmp_path / "empty", "--free", "m1", "--resume") == 2
    assert "NoCheckpoint" in capsys.readouterr().err


def _wait_until(condition, proc, what: str, cap_s: float = 600.0) -> None:
    """Poll ``condition()`` until it holds: no fixed sleep, so a loaded machine only makes it take longer. The cap
    is generous, only against a child that hangs; the child ending first is a failure of its own."""
    give_up = time.monotonic() + cap_s
    while not condition():
        assert proc.poll() is None, f"pdsl fit ended (exit {proc.returncode}) before {what}"
        assert time.monotonic() < give_up, f"no {what} within {cap_s:.0f} s"
        time.sleep(0.02)


def _checkpoint_epoch(path: Path) -> int:
    """The epoch of the checkpoint at ``path`` (0: none yet). It is replaced atomically: never read half-written."""
    if not path.exists():
        return 0
    return load_checkpoint(path)[0].epoch


def test_killed_run_resumes(tmp_path, nn_model, nn_data):
    """Kill `pdsl fit` (SIGKILL) once it has overwritten its first checkpoint, i.e. while it works on (or writes) a
    later epoch; --resume completes and nothing is torn. Load-independent: the kill follows the checkpoints the run
    writes, not a clock, and the run asks for so many epochs that it cannot end before the kill."""
    out = tmp_path / "out"
    epochs = 1_000_000
    cmd = [sys.executable, "-m", "pdsl", "fit", str(nn_model), "--data", str(nn_data), "-o", str(out), "--quiet",
           "--epochs", str(epochs), "--batch", "5"]
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    log = tmp_path / "fit.err"
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        _wait_until(lambda: _checkpoint_epoch(out / "checkpoint.npz") >= 2, proc, "a second checkpoint")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, log.read_text(errors="replace")[-2000:]
    assert not (out / "params.json").exists()
    state, _ = load_checkpoint(out / "checkpoint.npz")  # readable: never torn
    assert 2 <= state.epoch < epochs
    target = state.epoch + 2
    assert fit(nn_model, nn_data, out, "--epochs", str(target), "--batch", "5", "--resume") == 0
    params = json.loads((out / "params.json").read_text())
    assert params["epochs"] == target
    assert not [p for p in out.iterdir() if p.name.startswith(".")]
    with np.load(out / "networks.npz") as z:
        assert z["V"].shape == (25,) and np.all(np.isfinite(z["V"]))
    assert load_models(out / "nn_pendulum.fitted.phm")[0].params[0].default == params["values"]["m"]


def test_fit_an_observed_subset(tmp_path, spring_model, small_spring_data):
    """Only positions in the loss (velocities still start every chunk): the masses are still found."""
    out = tmp_path / "out"
    assert fit(spring_model, small_spring_data, out, "--free", "m1,m2", "--observe", "b1.x,b1.y,b2.x,b2.y") == 0
    params = json.loads((out / "params.json").read_text())
    assert params["values"]["m1"] == pytest.approx(1.3, rel=1e-3)
    assert params["values"]["m2"] == pytest.approx(0.7, rel=1e-3)
    assert params["settings"]["observe"] == ["b1.x", "b1.y", "b2.x", "b2.y"]


def test_stale_temporaries_are_removed_on_resume(tmp_path, spring_model, small_spring_data):
    out = tmp_path / "out"
    assert fit(spring_model, small_spring_data, out, "--free", "m1,m2", "--epochs", "1") == 0
    stale = out / ".checkpoint.npz.x1y2z3.npz"
    stale.write_bytes(b"torn")
    assert fit(spring_model, small_spring_data, out, "--free", "m1,m2", "--epochs", "2", "--resume") == 0
    assert not stale.exists()


def test_evaluate_a_fitted_network(tmp_path, nn_model, nn_data, capsys):
    out = tmp_path / "out"
    assert fit(nn_model, nn_data, out, "--epochs", "2", "--batch", "10") == 0
    js = tmp_path / "m.json"
    assert cli("evaluate", nn_model, "--data", nn_data, "--params", out / "params.json", "--json", js,
               "--integrator", "rk4") == 0
    summary = json.loads(js.read_text())
    assert 0 < summary["relative error (geometric mean over t>0)"]["mean"] < 1
    (out / "networks.npz").unlink()
    assert cli("evaluate", nn_model, "--data", nn_data, "--params", out / "params.json") == 2
    assert "BadParams" in capsys.readouterr().err


def test_fit_with_an_exogenous_input_column(tmp_path):
    """A driven oscillator: the input F is a data column; the free mass is found (to the O(dt²) of the
    linear interpolation of F between samples that the rollout's mid-stages see)."""
    model = tmp_path / "driven.phm"
    model.write_text("model Driven\n  param m = 1.0 {free, lower = 0}, k = 2.0, c = 0.1\n  input F\n"
                     "  var x = 0.5, v = 0.0\n  der(x) = v\n  der(v) = (F - k*x - c*v)/m\nend\n")
    sim = tmp_path / "sim.csv"
    assert cli("simulate", model, "--t-end", 4, "--dt", 0.02, "--param", "m=0.8", "--input", "F=sin(3*t)",
               "--rtol", 1e-11, "-o", sim) == 0
    # simulate writes the input it used as a column (issue 16): the file fits as it is
    assert sim.read_text().splitlines()[0] == "t,x,v,F"
    table = np.loadtxt(sim, delimiter=",", skiprows=1)
    np.testing.assert_allclose(table[:, 3], np.sin(3 * table[:, 0]), atol=1e-12)
    out = tmp_path / "out"
    assert fit(model, sim, out, "--val-fraction", "0") == 0
    assert json.loads((out / "params.json").read_text())["values"]["m"] == pytest.approx(0.8, rel=1e-3)
