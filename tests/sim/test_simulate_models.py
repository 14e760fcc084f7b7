"""End-to-end simulation: the CLI on bundled models, a DAE through IDAS, holonomic and
velocity (nonholonomic) constraints in Lagrangian models."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from pdsl.cli.main import main
from pdsl.data.csvio import split_header
from pdsl.pipeline import compile_model, load_models
from pdsl.sim.simulate import simulate, time_grid

MODELS = Path(__file__).resolve().parents[2] / "models"


def read_csv(path):
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    return rows[0], np.array(rows[1:], dtype=float)


def run_cli(tmp_path, model, *args):
    out = tmp_path / f"{model}.csv"
    rc = main(["simulate", str(MODELS / f"{model}.phm"), *args, "-o", str(out)])
    assert rc == 0
    return read_csv(out)


# ---------------------------------------------------------------- CLI
def test_cli_henon_heiles_energy_drift(tmp_path, capsys):
    header, data = run_cli(tmp_path, "henon_heiles", "--t-end", "100", "--dt", "0.1", "--rtol", "1e-10")
    assert header == ["t", "x", "y", "px", "py"]
    assert data.shape == (1001, 5)
    np.testing.assert_allclose(data[:, 0], np.linspace(0, 100, 1001), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(data[0, 1:], [0.1, -0.2, 0.3, 0.2])
    t, x, y, px, py = data.T
    H = (px**2 + py**2) / 2 + (x**2 + y**2) / 2 + x**2 * y - y**3 / 3
    drift = np.abs(H - H[0]).max() / abs(H[0])
    assert drift <= 1e-8, drift
    assert "energy: E(0) = 0.09066666667" in capsys.readouterr().out


def test_cli_lagrangian_header_and_velocity_init(tmp_path):
    header, data = run_cli(
        tmp_path, "double_pendulum", "--t-end", "1", "--dt", "0.5", "--init", "der(q1)=0.25", "--init", "q2=0.1"
    )
    assert header == ["t", "q1", "q2", "der(q1)", "der(q2)"]
    np.testing.assert_array_equal(data[0, 1:], [1.0, 0.1, 0.25, 0.0])


def test_cli_every_bundled_model_simulates(tmp_path):
    for path in sorted(MODELS.glob("*.phm")):
        if path.stem == "cucker_smale":
            continue  # simulated in tests/models/test_cucker_smale.py (its compile takes seconds)
        # exogenous inputs (no in-model law) get a value on the command line, as a user would give one
        inputs = [a for m in load_models(path) for u in m.inputs if u.law is None for a in ("--input", f"{u.name}=sin(t)")]
        header, data = run_cli(tmp_path, path.stem, "--t-end", "1", "--dt", "0.1", *inputs)
        assert split_header(header[0])[0] == "t" and data.shape == (11, len(header))  # `t [s]` in a model with units
        assert np.all(np.isfinite(data))


def test_cli_cart_pole_training_series_has_121_samples(tmp_path):
    """C5.2: 6 s sampled at 0.05 s, with F from the in-model feedback law (no --input needed)."""
    header, data = run_cli(tmp_path, "cart_pole", "--t-end", "6", "--dt", "0.05", "--rtol", "1e-10")
    assert header == ["t", "x", "theta", "der(x)", "der(theta)"]
    assert data.shape == (121, 5)


# ---------------------------------------------------------------- DAE
DECAY = """
model Decay "x' = -y with the algebraic y = x"
  var x = 1, y
  der(x) = -y
  0 = y - x
end
"""


def test_dae_smoke_idas_matches_exp():
    c = compile_model("decay.phm", text=DECAY)
    num = c.numeric
    assert c.system.is_dae and num.x_names == ("x",) and num.z_names == ("y",)
    assert num.rhs is None  # a DAE has no explicit rhs
    grid = time_grid(5.0, 0.1)
    res = simulate(num, grid, rtol=1e-10)
    assert res.info["integrator"] == "idas"
    ref = np.exp(-grid)
    assert np.abs(res.x[:, 0] - ref).max() <= 1e-8
    assert np.abs(res.z[:, 0] - ref).max() <= 1e-8


def test_dae_reports_consistent_algebraic_start():
    """z(t0) in the result is the consistent value IDAS computed, not the (wrong) start guess."""
    c = compile_model("decay.phm", text=DECAY.replace("var x = 1, y", "var x = 1, y = 5"))
    grid = time_grid(1.0, 0.5)
    res = simulate(c.numeric, grid, x0={"x": 2.0}, rtol=1e-10)
    np.testing.assert_allclose(res.z[:, 0], 2 * np.exp(-grid), rtol=1e-8)
    np.testing.assert_allclose(res.x[:, 0], 2 * np.exp(-grid), rtol=1e-8)


def test_dae_cli(tmp_path):
    path = tmp_path / "decay.phm"
    path.write_text(DECAY)
    out = tmp_path / "decay.csv"
    assert main(["simulate", str(path), "--t-end", "2", "--dt", "0.5", "--rtol", "1e-10", "-o", str(out)]) == 0
    header, data = read_csv(out)
    assert header == ["t", "x", "y"]
    np.testing.assert_allclose(data[:, 1:], np.exp(-data[:, :1]) * [1, 1], rtol=1e-8)


# ---------------------------------------------------------------- holonomic constraint
PENDULUM_XY = """
model PendulumXY "point pendulum in x, y with a holonomic constraint"
  param m = 1.3, l = 0.9, g = 9.81
  coord x, y
  lagrangian m/2*(der(x)^2 + der(y)^2) - m*g*y
  constraint x^2 + y^2 = l^2
end
"""

PENDULUM_ANGLE = """
model PendulumAngle
  param m = 1.3, l = 0.9, g = 9.81
  coord th
  lagrangian m/2*l^2*der(th)^2 + m*g*l*cos(th)
end
"""


def test_holonomic_pendulum_matches_angle_pendulum():
    cxy = compile_model("xy.phm", text=PENDULUM_XY)
    cth = compile_model("th.phm", text=PENDULUM_ANGLE)
    assert cxy.system.multipliers and len(cxy.system.constraints) == 1
    l, th0, w0 = 0.9, 2.0, 1.5  # a large swing
    x0 = {"x": l * np.sin(th0), "y": -l * np.cos(th0), "der(x)": l * np.cos(th0) * w0, "der(y)": l * np.sin(th0) * w0}
    grid = time_grid(10.0, 0.05)
    rxy = simulate(cxy.numeric, grid, x0=x0, rtol=1e-11)
    rth = simulate(cth.numeric, grid, x0={"th": th0, "der(th)": w0}, rtol=1e-11)
    th = rth.x[:, 0]
    pos_err = max(np.abs(rxy.x[:, 0] - l * np.sin(th)).max(), np.abs(rxy.x[:, 1] + l * np.cos(th)).max())
    assert pos_err <= 1e-7, pos_err
    assert rxy.constraint_rms.max() <= 1e-8, rxy.constraint_rms.max()
    # index-1 (acceleration-level) formulation: energy and constraint drift slowly, bounded by the tolerance
    assert np.abs(rxy.energy - rxy.energy[0]).max() <= 1e-7 * abs(rxy.energy[0])
    # the instantaneous accelerations agree too (no integration involved)
    rng = np.random.default_rng(7)
    for _ in range(20):
        t, w = rng.uniform(-np.pi, np.pi), rng.normal(0, 2)
        xs = [l * np.sin(t), -l * np.cos(t), l * np.cos(t) * w, l * np.sin(t) * w]
        a = np.asarray(cxy.numeric.rhs(0, xs, cxy.numeric.p_default, [])).ravel()[2:]
        alpha = float(cth.numeric.rhs(0, [t, w], cth.numeric.p_default, [])[1])
        ref = [l * (np.cos(t) * alpha - np.sin(t) * w**2), l * (np.sin(t) * alpha + np.cos(t) * w**2)]
        assert np.abs(a - ref).max() <= 1e-11


# ---------------------------------------------------------------- velocity constraints (LANGUAGE.md §8)
ROLLING_DISK = """
model RollingDisk "vertical disk rolling without slipping"
  param I = 1.0, J = 0.5, m = 1.0, R = 0.5
  coord theta, phi, x, y
  lagrangian I/2*der(theta)^2 + J/2*der(phi)^2 + m/2*(der(x)^2 + der(y)^2)
  constraint der(x) = R*cos(phi)*der(theta)
  constraint der(y) = R*sin(phi)*der(theta)
end
"""


@pytest.mark.parametrize("I,J,m,R,w,W", [(0.4, 0.25, 1.3, 0.3, 1.7, 0.6), (1.0, 0.5, 1.0, 0.5, 1.0, 3.0)])
def test_rolling_disk_follows_circle(I, J, m, R, w, W):
    """BENCHMARKS D4: started on the constraint distribution, the disk follows the analytic circle."""
    c = compile_model("disk.phm", text=ROLLING_DISK)
    num = c.numeric
    assert len(c.system.multipliers) == 2 and not c.system.constraints  # velocity-level only
    th0, ph0, x0, y0 = 0.2, 0.4, 0.1, -0.3
    init = {"theta": th0, "phi": ph0, "x": x0, "y": y0, "der(theta)": w, "der(phi)": W,
            "der(x)": R * np.cos(ph0) * w, "der(y)": R * np.sin(ph0) * w}
    grid = time_grid(20.0, 0.1)
    res = simulate(num, grid, x0=init, params={"I": I, "J": J, "m": m, "R": R}, rtol=1e-12)
    t = grid
    ph = ph0 + W * t
    ref = np.column_stack([
        th0 + w * t, ph, x0 + R * w / W * (np.sin(ph) - np.sin(ph0)), y0 - R * w / W * (np.cos(ph) - np.cos(ph0)),
        np.full_like(t, w), np.full_like(t, W), R * w * np.cos(ph), R * w * np.sin(ph),
    ])
    err = np.abs(res.x - ref).max()
    assert err <= 1e-8, err
    p1 = (I + m * R**2) * res.x[:, 4]
    assert np.abs(p1 - p1[0]).max() <= 1e-12 * abs(p1[0])
    # the velocity constraints hold along the whole trajectory
    thd, phi, xd, yd = res.x[:, 4], res.x[:, 1], res.x[:, 6], res.x[:, 7]
    assert np.abs(xd - R * np.cos(phi) * thd).max() <= 1e-9
    assert np.abs(yd - R * np.sin(phi) * thd).max() <= 1e-9
