"""Baumgarte drift control (``simulate --stabilize baumgarte``) in both Cartesian formulations.

The constraint rows become Φ̈ + 2αΦ̇ + β²Φ = 0 (pdsl/lower/cartesian.py, module docstring).

Measured on models/pendulum3.phm (A3.1 values), start q = (1.2, −0.5, 0.8), q̇ = (0.5, −1, 1.5),
T = 60 s sampled every 0.06 s, CVODES at rtol 1e-5 (atol 1e-7), default gains α = β = 11.8
(3 × the fastest rate of the motion at the start, 3.94/s). Maximum constraint RMS over the run:

    formulation        none       baumgarte   project
    Eq. 6 (momenta)    3.1e-4     2.1e-5      1.4e-12
    Eq. 7 (velocities) 5.1e-2     2.0e-5      1.3e-12

i.e. Baumgarte reduces the drift 15× (Eq. 6) and 2600× (Eq. 7), and the violation stays bounded
(flat from the first to the second half) while it grows without. The unstabilised Eq. 6 drifts far
less than Eq. 7 because its projection form already keeps Φ and DΦ M⁻¹p invariant. Baumgarte costs
no more than the unstabilised run (0.3–0.4 s here); `project` restarts the integrator at every
output step (3.5 s). At rtol 1e-4 the same runs give none / baumgarte 2.2e-3 / 2.3e-4 (Eq. 6) and
7.2e-1 / 4.4e-4 (Eq. 7).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import expm

from pdsl.backend.functions import to_casadi
from pdsl.cli.main import main
from pdsl.diagnostics import PdslError
from pdsl.lower import lower
from pdsl.pipeline import load_models
from pdsl.sim.simulate import baumgarte_gains, simulate, simulate_batch, time_grid

PENDULUM3 = "models/pendulum3.phm"
L3 = np.array([1.1167, 0.9389, 1.0359])

_CACHE: dict = {}


def numeric(formulation: str, stabilize: str = "none"):
    key = (formulation, stabilize)
    if key not in _CACHE:
        model = load_models(PENDULUM3)[0]
        _CACHE[key] = to_casadi(lower(model, formulation, stabilize=stabilize))
    return _CACHE[key]


def chain_start(q, qd, lengths=L3) -> dict[str, float]:
    """A3.1 maps from angles to the shown columns (positions, velocities)."""
    pos = np.column_stack([np.cumsum(lengths * np.sin(q)), np.cumsum(-lengths * np.cos(q))])
    vel = np.column_stack([np.cumsum(lengths * np.cos(q) * qd), np.cumsum(lengths * np.sin(q) * qd)])
    init = {}
    for i in range(len(q)):
        init[f"b[{i + 1}].x"], init[f"b[{i + 1}].y"] = pos[i]
        init[f"b[{i + 1}].vx"], init[f"b[{i + 1}].vy"] = vel[i]
    return init


START = chain_start(np.array([1.2, -0.5, 0.8]), np.array([0.5, -1.0, 1.5]))


@pytest.mark.parametrize("formulation, min_factor", [("hamiltonian", 5.0), ("lagrangian", 1000.0)])
def test_baumgarte_bounds_the_drift_over_a_long_horizon(formulation, min_factor):
    grid = time_grid(60.0, 0.06)
    # CVODES for all three (the factors were measured with it; auto's DOP853 drifts less without stabilisation)
    none = simulate(numeric(formulation), grid, x0=START, rtol=1e-5, integrator="cvodes")
    bg = simulate(numeric(formulation, "baumgarte"), grid, x0=START, rtol=1e-5, stabilize="baumgarte", integrator="cvodes")
    proj = simulate(numeric(formulation), grid, x0=START, rtol=1e-5, stabilize="project", integrator="cvodes")
    v_none, v_bg, v_proj = none.constraint_rms.max(), bg.constraint_rms.max(), proj.constraint_rms.max()
    assert v_none >= min_factor * v_bg, (v_none, v_bg)
    assert v_bg <= 5e-5, v_bg
    assert v_proj <= 1e-10, v_proj
    half = len(grid) // 2  # bounded: no growth from the first half to the second
    assert bg.constraint_rms[half:].max() <= 2.0 * bg.constraint_rms[:half].max()
    assert none.constraint_rms[half:].max() > none.constraint_rms[:half].max()  # the drift it removes
    gains = bg.info["baumgarte"]
    assert gains.alpha == gains.beta and 8.0 < gains.alpha < 16.0, gains


@pytest.mark.parametrize("formulation", ["hamiltonian", "lagrangian"])
def test_baumgarte_does_not_change_the_short_horizon_trajectory(formulation):
    """Over 1 s the stabilised run is as accurate as the unstabilised one (error against rtol 1e-12).

    Measured max |error| of the shown state (size ~4), none / baumgarte: Eq. 6 1.4e-4 / 3.7e-4 at
    rtol 1e-5 and 3.4e-7 / 4.4e-7 at 1e-8; Eq. 7 2.7e-4 / 3.7e-4 and 9.6e-7 / 1.0e-6. (Gains 10×
    larger, α = β = 39, give 1.2e-3 at rtol 1e-5: the default trades a little drift for accuracy.)
    """
    grid = time_grid(1.0, 0.02)
    ref = simulate(numeric(formulation), grid, x0=START, rtol=1e-12, atol=1e-14)
    for rtol in (1e-5, 1e-8):
        none = simulate(numeric(formulation), grid, x0=START, rtol=rtol)
        bg = simulate(numeric(formulation, "baumgarte"), grid, x0=START, rtol=rtol, stabilize="baumgarte")
        err_none, err_bg = np.abs(none.shown - ref.shown).max(), np.abs(bg.shown - ref.shown).max()
        assert err_bg <= 4 * err_none, (rtol, err_none, err_bg)
        assert err_bg <= 1e3 * rtol, (rtol, err_bg)  # global error ~100 rtol on a state of size ~4


@pytest.mark.parametrize("formulation", ["hamiltonian", "lagrangian"])
def test_violation_obeys_the_baumgarte_equation(formulation):
    """From an off-manifold start each row follows Φ̈ + 2αΦ̇ + β²Φ = 0 exactly (α ≠ β: underdamped)."""
    num = numeric(formulation, "baumgarte")
    alpha, beta = 1.5, 4.0
    init = dict(START)
    init["b[2].x"] += 0.01  # off the manifold: Φ and Φ̇ both non-zero
    init["b[3].vy"] -= 0.02
    grid = time_grid(2.0, 0.05)
    res = simulate(num, grid, x0=init, rtol=1e-11, atol=1e-13, project=False, stabilize="baumgarte",
                   baumgarte_alpha=alpha, baumgarte_beta=beta)
    p = res.info["baumgarte"]
    assert (p.alpha, p.beta) == (alpha, beta)
    pvec = num.param_vector({"baumgarte.alpha": alpha, "baumgarte.beta": beta})
    r0 = np.asarray(num.invariants(0.0, res.x[0], pvec)).ravel()  # Φ_1, Φ̇_1, Φ_2, Φ̇_2, …
    phi0, dphi0 = r0[0::2], r0[1::2]
    assert np.abs(phi0).max() > 1e-3 and np.abs(dphi0).max() > 1e-3
    A = np.array([[0.0, 1.0], [-beta**2, -2 * alpha]])
    worst = 0.0
    for k, t in enumerate(grid):
        phi = np.asarray(num.constraints(t, res.x[k], pvec)).ravel()
        expected = [(expm(A * t) @ [a, b])[0] for a, b in zip(phi0, dphi0)]
        worst = max(worst, np.abs(phi - expected).max())
    assert worst <= 1e-8, worst
    assert np.abs(np.asarray(num.constraints(2.0, res.x[-1], pvec))).max() < 0.05 * np.abs(phi0).max()


def test_default_gains_follow_the_time_scale():
    """ω = 3 ρ: ρ = √(max|ẍ|/L) for a pendulum released from rest horizontally (where ∂f/∂x = 0)."""
    num = numeric("lagrangian", "baumgarte")
    init = chain_start(np.array([np.pi / 2, np.pi / 2, np.pi / 2]), np.zeros(3))
    x0 = simulate(num, time_grid(0.1, 0.1), x0=init, stabilize="baumgarte").x[0]
    gains = baumgarte_gains(num, x0[None, :], num.p_default, time_grid(10.0, 0.1))
    assert gains.alpha == gains.beta
    # ẍ of the bottom bob at release is of order g; L = min link length/√2 (a link between bobs)
    rho = gains.alpha / 3
    assert 0.5 * np.sqrt(9.81 / 1.0) < rho < 3 * np.sqrt(9.81 / (0.9389 / np.sqrt(2))), rho
    # a faster motion gives larger gains; a fixed step caps them at 1/h
    fast = simulate(num, time_grid(0.1, 0.1), x0=chain_start(np.zeros(3), np.array([20.0, 0, 0])), stabilize="baumgarte")
    g_fast = baumgarte_gains(num, fast.x[:1], num.p_default, time_grid(10.0, 0.1))
    assert g_fast.alpha > 3 * gains.alpha
    capped = baumgarte_gains(num, fast.x[:1], num.p_default, time_grid(10.0, 0.1), fixed_step=0.05)
    assert capped.alpha == pytest.approx(20.0) and "capped" in capped.how
    assert baumgarte_gains(num, x0[None, :], num.p_default, time_grid(1.0, 0.1), alpha=3.0).beta == 3.0


def test_batch_uses_one_set_of_gains():
    num = numeric("hamiltonian", "baumgarte")
    ref = numeric("hamiltonian")
    grid = time_grid(1.0, 0.05)
    x0s = np.array([simulate(ref, time_grid(0.05, 0.05), x0=chain_start(q, -q)).x[0]
                    for q in (np.array([0.3, 0.2, 0.1]), np.array([1.0, -1.0, 0.5]))])
    runs = simulate_batch(num, grid, x0s, rtol=1e-8, stabilize="baumgarte", threads=1)
    assert runs[0].info["baumgarte"] == runs[1].info["baumgarte"]
    for r in runs:
        assert r.constraint_rms.max() <= 1e-7


def test_mismatched_lowering_and_option_are_errors():
    with pytest.raises(PdslError) as err:
        simulate(numeric("hamiltonian"), time_grid(1.0, 0.1), x0=START, stabilize="baumgarte")
    assert err.value.codes == ["BadOption"] and "lower" in str(err.value)
    with pytest.raises(PdslError) as err:
        simulate(numeric("hamiltonian", "baumgarte"), time_grid(1.0, 0.1), x0=START)
    assert err.value.codes == ["BadOption"]
    with pytest.raises(PdslError) as err:
        simulate(numeric("hamiltonian", "baumgarte"), time_grid(1.0, 0.1), x0=START, stabilize="baumgarte",
                 baumgarte_alpha=-1.0)
    assert err.value.codes == ["BadOption"] and "non-negative" in str(err.value)


def test_cli_baumgarte_reports_gains_and_rejects_bad_options(tmp_path, capsys):
    out = tmp_path / "p.csv"
    base = ["simulate", PENDULUM3, "--t-end", "3", "--dt", "0.03", "-o", str(out), "--init", "b[1].x=0.5",
            "--init", "b[2].x=1", "--init", "b[3].x=1.5"]
    assert main(base + ["--stabilize", "baumgarte", "--rtol", "1e-6"]) == 0
    text = capsys.readouterr().out
    assert "Baumgarte stabilisation: α = " in text and "fastest rate" in text
    assert main(base + ["--stabilize", "baumgarte", "--baumgarte-alpha", "7", "--formulation", "lagrangian"]) == 0
    assert "α = 7, β = 7 (given)" in capsys.readouterr().out
    assert main(base + ["--baumgarte-alpha", "7"]) == 2
    assert "error[BadOption]" in capsys.readouterr().err
    assert main(base + ["--stabilize", "baumgarte", "--baumgarte-beta", "-2"]) == 2
    assert "non-negative" in capsys.readouterr().err
    assert main(base + ["--stabilize", "baumgart"]) == 2
    assert "baumgarte" in capsys.readouterr().err  # the hint lists the choices
    assert main(["simulate", "models/double_well.phm", "--t-end", "1", "--dt", "0.1", "-o", str(out),
                 "--stabilize", "baumgarte"]) == 2
    err = capsys.readouterr().err
    assert "models/double_well.phm:" in err and "error[BadOption]" in err and "Cartesian" in err
