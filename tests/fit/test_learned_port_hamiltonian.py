"""Learned port-Hamiltonian elements train through `pdsl fit` (issue 6, item 4).

A mass–spring–damper network whose spring energy H_k(q) and damper map are MLPs (the damper
`{dissipative}`, so e·f ≥ 0 by construction) is fitted to trajectories of the true network
(m = 1, k = 4, d = 0.3). Measured (seeded, 2026-11-23): L1 chunk loss 0.135 -> 0.015 in 60
epochs; the learned spring force dH_k/dq follows k·q on the data's range.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")

from fit_helpers import cli  # noqa: E402
from pdsl.fit.run import apply_fitted  # noqa: E402
from pdsl.pipeline import compile_model  # noqa: E402

TRUE = """\
model MSD
  param m = 1.0, k = 4.0, d = 0.3
  flow_store mass(p) energy p^2/(2*m)
  effort_store spring(q) energy k*q^2/2
  resistive damper: f = d*e
  junction common_effort(mass, spring, damper)
end
"""

LEARNED = """\
model LearnedMSD "known mass; learned spring energy and learned dissipative damper"
  param m = 1.0
  nn Hk: mlp(hidden = [16], act = tanh, out = 1)
  nn Rd: mlp(hidden = [8], act = tanh, out = 1)
  flow_store mass(p) energy p^2/(2*m)
  effort_store spring(q) energy Hk(q)
  resistive damper {dissipative}: f = Rd(e)
  junction common_effort(mass, spring, damper)
end
"""


def test_learned_storage_and_dissipative_resistor_train(tmp_path):
    (tmp_path / "true.phm").write_text(TRUE)
    (tmp_path / "learned.phm").write_text(LEARNED)
    data = tmp_path / "data.csv"
    assert cli("simulate", tmp_path / "true.phm", "--init", "q=1", "--random-init", 12, "--random-scale", 0.7,
               "--seed", 0, "--t-end", 4, "--dt", 0.05, "--rtol", 1e-10, "-o", data) == 0
    out = tmp_path / "fit"
    assert cli("fit", tmp_path / "learned.phm", "--data", data, "-o", out, "--epochs", 60, "--lr", 1e-2,
               "--batch", 64, "--seed", 0, "--quiet") == 0
    hist = np.genfromtxt(out / "history.csv", delimiter=",", names=True)
    assert hist["val"][-1] < hist["val"][0] / 4, (hist["val"][0], hist["val"][-1])
    assert json.loads((out / "params.json").read_text())["networks"]

    c = compile_model(tmp_path / "learned.phm")
    num = apply_fitted(c.numeric, out / "params.json")
    i_p, i_q = num.x_names.index("p"), num.x_names.index("q")
    qs = np.linspace(-0.6, 0.6, 13)
    force = []
    for q in qs:
        x = np.zeros(num.nx)
        x[i_q] = q
        force.append(-float(np.asarray(num.rhs(0.0, x, num.p_default, [])).ravel()[i_p]))  # p' = -dHk/dq at p = 0
    force = np.array(force)
    rel = np.linalg.norm(force - 4.0 * qs) / np.linalg.norm(4.0 * qs)
    assert rel < 0.35, (rel, force)
    # dissipative by construction: without inputs dH/dt = ∇H·ẋ <= 0 at any state (central differences)
    rng = np.random.default_rng(1)
    for _ in range(20):
        x = rng.normal(size=num.nx)
        xdot = np.asarray(num.rhs(0.0, x, num.p_default, [])).ravel()
        h = 1e-6
        H = [float(num.energy(0.0, x + s * h * xdot, num.p_default, [])) for s in (1, -1)]
        assert (H[0] - H[1]) / (2 * h) <= 1e-7
