"""Acceptance: `pdsl fit` recovers both masses of a double pendulum from noisy trajectories.

Why a spring. For a double pendulum under gravity alone the masses are NOT both identifiable
from trajectories: scaling m1 and m2 by the same factor c scales the momenta p = m v, the
gravity forces m g and the constraint forces alike, so the accelerations — and hence every
trajectory — are unchanged; the equations of motion depend on the masses only through
m2/(m1 + m2). (``test_params_loss.py::test_without_spring_only_the_mass_ratio_matters`` checks
exactly this: the chunk loss is invariant under m -> 2m.) Something that does not scale with
the masses must fix the absolute scale. Here a KNOWN linear spring (k = 4, rest length 0.5)
pulls the lower bob towards the fixed point (0, -2.5): its force is mass-independent, so the
accelerations now depend on m1 and m2 separately and "recovers both masses within 1 %" is a
meaningful claim. g, k, the link lengths and the spring anchor are known; m1 and m2 are free,
start at 1.0 (the model's defaults) and are fitted in log space (``lower = 0``).

Data (BENCHMARKS A3.1/A4 style, seeded): 20 trajectories from `pdsl simulate --random-init 20`
with m1 = 1.3, m2 = 0.7, 3 s at dt = 0.03 (101 samples), CVODES rtol 1e-10; then Gaussian
noise of 1 % of each column's standard deviation on every position and velocity column.
Fit: Gauss–Newton on the MSE rollout loss of 4-step RK4 chunks (A5), all overlapping chunks
(stride 1) of the 16 training trajectories, 4 trajectories held out for validation.
Measured (noise seed 1, used here): m1 = 1.29900, m2 = 0.69990 (errors −0.08 %, −0.01 %); over
noise seeds 0–7 the worst error was 0.45 % (m1, seed 4), so the 1 % bound has a margin of about 2x
against noise and none of it is needed for the discretisation: on clean data the same fit is
within 0.01 % (RK4 at dt = 0.03).
"""

import json
import time

from fit_helpers import add_noise, cli

TRUE = {"m1": 1.3, "m2": 0.7}


def test_recovers_both_masses_within_one_percent(tmp_path, spring_model, spring_data, capsys):
    start = time.process_time()  # CPU seconds of this process: other load on the machine does not count
    noisy = add_noise(spring_data, tmp_path / "noisy.csv", 0.01, seed=1)
    out = tmp_path / "fit"
    rc = cli("fit", spring_model, "--data", noisy, "--free", "m1,m2", "--stride", "1", "--seed", "0",
             "-o", out, "--quiet")
    assert rc == 0, capsys.readouterr().err
    params = json.loads((out / "params.json").read_text())
    for name, true in TRUE.items():
        fitted = params["values"][name]
        assert params["params"][name]["start"] == 1.0
        assert abs(fitted / true - 1) < 0.01, f"{name} = {fitted} (true {true})"
    assert params["converged"]
    assert params["values"]["g"] == 9.81 and params["values"]["k"] == 4.0  # known parameters untouched
    # the fitted model predicts the clean data far better than the start values do
    m_fit, m_start = tmp_path / "fit.json", tmp_path / "start.json"
    assert cli("evaluate", spring_model, "--data", spring_data, "--params", out / "params.json", "--json", m_fit) == 0
    assert cli("evaluate", spring_model, "--data", spring_data, "--json", m_start) == 0
    key = "relative error (geometric mean over t>0)"
    err_fit = json.loads(m_fit.read_text())[key]["mean"]
    err_start = json.loads(m_start.read_text())[key]["mean"]
    assert err_fit < 0.01 * err_start
    assert time.process_time() - start < 60
    print(f"m1 = {params['values']['m1']:.6f}, m2 = {params['values']['m2']:.6f}, Err {err_fit:.2e} vs {err_start:.2e}")
