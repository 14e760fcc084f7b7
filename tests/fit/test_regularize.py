"""Regularisers of `pdsl fit` (pdsl/fit/regularize.py; BENCHMARKS C4 Eqs. 8–20, C5.2).

The pruning case: data from a mass–spring–damper (p-H network of C2: m = 1, k = 4, d = 0.3, no
forcing), fitted by the same network with a REDUNDANT second damper `extra` in parallel (f = d2·e).
The data determine only d + d2 = 0.3; how the damping splits is not identified. Starting from
k = 3, d = d2 = 0.1 (log-space parameters, `lower = 0`), AdamW lr 0.1 (cosine), minibatches of 8
chunks of 10 steps, rk4; measured on this machine (the test asserts looser bounds):

* no regulariser (100 or 300 epochs): d = d2 = 0.15001 (the symmetric split), k = 4.0001, MSE 1.2e-11
* sparsity penalty 1e-2·mean|f_extra|, 300 epochs: d2 = 4.5e-4, d = 0.29957, k = 4.0001, MSE 1.2e-11
* primal–dual (ε = 1e-6, α = 1e5, λ0 = 100), 300 epochs: d2 = 1.1e-3, d = 0.2989, k = 4.0001,
  MSE 1.2e-11, final λ = 441

so the redundant branch is pruned — the L1 norm of its flow along the data falls from 0.036
(after the first epoch) to 2.2e-4 (penalty) / 5.5e-4 (primal–dual) — while the fit stays at the
level of the unregularised one (k's 1e-4 bias is rk4's at dt = 0.1). d2 decays geometrically rather
than reaching 0: it lives in log space, and AdamW moves log d2 by at most about lr per step. The
gradients of the regularised objective are checked against central finite differences.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pdsl.cli.main import main
from pdsl.data.csvio import write_table
from pdsl.diagnostics import PdslError
from pdsl.fit import FitConfig, prepare, run_fit
from pdsl.fit.config import load_toml
from pdsl.fit.regularize import RegularizedLoss, flow_expressions, port_variables

TRUE_MSD = """\
model MSD "mass-spring-damper, p-H network"
  param m = 1.0, k = 4.0, d = 0.3
  flow_store mass(p) energy p^2/(2*m)
  effort_store spring(q) energy k*q^2/2
  resistive damper: f = d*e
  junction common_effort(mass, spring, damper)
end
"""

# the same network with a redundant parallel damper
MSD2 = """\
model MSD2 "mass-spring-damper with a redundant parallel damper"
  param m = 1.0, k = 3.0 {free, lower = 0}, d = 0.1 {free, lower = 0}, d2 = 0.1 {free, lower = 0}
  flow_store mass(p) energy p^2/(2*m)
  effort_store spring(q) energy k*q^2/2
  resistive damper: f = d*e
  resistive extra: f = d2*e
  junction common_effort(mass, spring, damper, extra)
  output force = d2*p/m
end
"""


@pytest.fixture(scope="module")
def msd(tmp_path_factory):
    """(model path, data path): 4 free oscillations of the true MSD, 8 s at dt 0.1."""
    import pdsl
    from pdsl.sim.simulate import simulate, time_grid

    d = tmp_path_factory.mktemp("reg")
    true = d / "msd.phm"
    true.write_text(TRUE_MSD)
    num = pdsl.compile_model(true).numeric
    rng = np.random.default_rng(3)
    rows = []
    for k in range(4):
        q0, p0 = rng.uniform(-1, 1, 2)
        res = simulate(num, time_grid(8.0, 0.1), x0={"q": q0, "p": p0}, rtol=1e-11)
        cols = {n: res.x[:, i] for i, n in enumerate(res.x_names)}
        rows.append(np.column_stack([np.full(len(res.t), k), res.t, cols["p"], cols["q"]]))
    data = d / "msd.csv"
    write_table(data, ["traj", "t", "p", "q"], np.vstack(rows))
    model = d / "msd2.phm"
    model.write_text(MSD2)
    return model, data


def _cfg(data, **kw) -> FitConfig:
    base = dict(data=str(data), method="adamw", loss="mse", chunk=10, val_fraction=0.0, epochs=300, lr=0.05,
                integrator="rk4", batch=200)
    base.update(kw)
    return FitConfig(**base)


def _fit(tmp_path, model, data, **kw) -> dict:
    s = run_fit(str(model), None, _cfg(data, **kw), tmp_path, progress=False, log=lambda _: None)
    run = prepare(str(model), None, _cfg(data, **kw))
    from pdsl.fit.data import make_chunks

    theta = run.layout.theta_from_p(s["p"])
    s["mse"] = run.loss.value(theta, make_chunks(run.train, 10, 10)) if not isinstance(run.loss, RegularizedLoss) \
        else run.loss.base.value(theta, make_chunks(run.train, 10, 10))
    return s


# ---------------------------------------------------------------- flows of the p-H lowering
def test_port_variables_of_the_network(msd):
    import pdsl
    import sympy as sp

    c = pdsl.compile_model(msd[0])
    ports = port_variables(c.system)
    p, d2, m = (sp.Symbol(n) for n in ("p", "d2", "m"))
    by_name = {k: v for k, v in ports.items()}
    e, f = by_name["extra"]
    free = {s.name for s in (e.free_symbols | f.free_symbols)}
    assert free <= {"p", "q", "m", "k", "d", "d2"}
    # velocity on the common-effort junction, force d2·velocity through the extra damper
    subs = {s: v for s in e.free_symbols | f.free_symbols for n, v in (("p", 0.7), ("m", 1.0), ("d2", 0.2), ("q", 0.3),
                                                                          ("k", 3.0), ("d", 0.1)) if s.name == n}
    assert float(e.subs(subs)) == pytest.approx(0.7)
    assert float(f.subs(subs)) == pytest.approx(0.14)
    assert [o.name for o in flow_expressions(c.model, c.system, ["extra", "damper.e", "force"])] == \
        ["extra.f", "damper.e", "force"]
    with pytest.raises(PdslError, match="neither a declared output nor a p-H element port"):
        flow_expressions(c.model, c.system, ["nope"])


# ---------------------------------------------------------------- exact gradients
@pytest.mark.parametrize("settings", [
    {"equilibrium": {"weight": 0.7, "at": {"q": 0.4, "p": -0.2}}, "sparsity": {"flows": ["extra", "damper"], "weight": 0.3}},
    {"equilibrium": {"weight": 2.0}, "sparsity": {"flows": ["extra.f", "force"], "epsilon": 1e-3, "alpha": 10.0,
                                                  "lambda0": 3.0}},
])
def test_objective_gradient_matches_finite_differences(msd, settings):
    model, data = msd
    run = prepare(str(model), None, _cfg(data, **settings))
    assert isinstance(run.loss, RegularizedLoss)
    from pdsl.fit.data import make_chunks

    chunks = make_chunks(run.train, 10, 10)
    rng = np.random.default_rng(0)
    theta = run.layout.theta_from_p(run.p_start) + rng.normal(0, 0.2, run.layout.n_theta)
    L, g = run.loss.value_grad(theta, chunks)
    h = 1e-6
    fd = np.array([(run.loss.value_grad(theta + h * e, chunks)[0] - run.loss.value_grad(theta - h * e, chunks)[0]) / (2 * h)
                   for e in np.eye(len(theta))])
    assert np.max(np.abs(fd - g)) <= 1e-7 * max(1.0, np.max(np.abs(g)))
    # the objective is what the docstring says: J + w_eq·E + w_sp·R, or λ(J + w_eq·E − ε) + w_sp·R
    reg = run.loss.reg
    J = run.loss.base.value(theta, chunks)
    v = reg.values(theta)
    fit = J + settings["equilibrium"]["weight"] * v["equilibrium"]
    sp = settings["sparsity"]
    want = fit + sp["weight"] * v["sparsity"] if "epsilon" not in sp else sp["lambda0"] * (fit - sp["epsilon"]) + v["sparsity"]
    assert L == pytest.approx(want, rel=1e-10)


def test_equilibrium_term_is_the_rhs_norm(msd):
    model, data = msd
    run = prepare(str(model), None, _cfg(data, equilibrium={"weight": 1.0, "at": {"q": 0.5, "p": 0.25}}))
    theta = run.layout.theta_from_p(run.p_start)
    # q' = p/m, p' = −k q − (d + d2) p/m at k = 3, d = d2 = 0.1, m = 1
    want = 0.25 ** 2 + (-3 * 0.5 - 0.2 * 0.25) ** 2
    assert run.loss.reg.values(theta)["equilibrium"] == pytest.approx(want, rel=1e-12)
    assert run.loss.reg.values(theta)["sparsity"] == 0.0


# ---------------------------------------------------------------- pruning the redundant damper
def test_sparsity_prunes_the_redundant_damper(msd, tmp_path):
    model, data = msd
    fast = dict(batch=8, lr=0.1)
    plain = _fit(tmp_path / "plain", model, data, epochs=100, **fast)
    pen = _fit(tmp_path / "pen", model, data, epochs=300, sparsity={"flows": ["extra"], "weight": 1e-2}, **fast)
    pd = _fit(tmp_path / "pd", model, data, epochs=300,
              sparsity={"flows": ["extra"], "epsilon": 1e-6, "alpha": 1e5, "lambda0": 100.0}, **fast)
    # without the regulariser the split stays symmetric (only d + d2 is identified)
    assert plain["params"]["d2"] == pytest.approx(0.15, abs=5e-3) and plain["mse"] < 1e-9
    for s in (pen, pd):
        assert s["params"]["d2"] < 3e-3, s["params"]  # < 1 % of d, 50x below the unregularised split
        assert s["params"]["d"] == pytest.approx(0.3, abs=3e-3)
        assert s["params"]["k"] == pytest.approx(4.0, abs=1e-3)
        assert s["mse"] < 1e-9
    # the primal–dual bookkeeping is in the checkpoint: λ per epoch, the constraint value J + E, the flows' L1 norm
    state = np.load(tmp_path / "pd" / "checkpoint.npz")
    rec = json.loads(str(state["header"]))["extra"]["regularizer"]
    assert len(rec["lambda"]) == 300 and rec["lambda"][0] == 100.0
    assert rec["sparsity"][-1] < 1e-3 < rec["sparsity"][0] and max(rec["fit"][-50:]) < 1e-6


# ---------------------------------------------------------------- settings
def test_toml_tables_and_cli_flags(msd, tmp_path, capsys):
    model, data = msd
    toml = tmp_path / "fit.toml"
    toml.write_text(f'data = "{data}"\nmethod = "adamw"\n\n[sparsity]\nflows = ["extra"]\nweight = 2e-3\n\n'
                    '[equilibrium]\nweight = 0.5\nat = { q = 0.0 }\n')
    cfg = load_toml(toml)
    assert cfg["sparsity"] == {"flows": ["extra"], "weight": 2e-3} and cfg["equilibrium"] == {"weight": 0.5, "at": {"q": 0.0}}
    bad = tmp_path / "bad.toml"
    bad.write_text('data = "x.csv"\n\n[sparsity]\nflow = ["extra"]\n')
    with pytest.raises(PdslError) as err:
        load_toml(bad)
    assert err.value.codes == ["BadConfig"] and "sparsity.flow" in str(err.value)
    assert err.value.diagnostics[0].span.line == 4  # the offending `flow = ...` line of the table
    # Gauss–Newton does not take regularisers; auto picks adamw
    assert main(["fit", str(model), "--data", str(data), "--method", "gauss-newton", "--sparsity", "extra", "-o",
                 str(tmp_path / "gn")]) != 0
    assert "trained with adamw" in capsys.readouterr().err
    out = tmp_path / "cli"
    assert main(["fit", str(model), "--data", str(data), "--config", str(toml), "--chunk", "10", "--epochs", "3",
                 "--loss", "mse", "--sparsity-epsilon", "1e-6", "--dual-step", "100", "--equilibrium-at", "p=0.1",
                 "--quiet", "-o", str(out)]) == 0
    settings = json.loads((out / "params.json").read_text())["settings"]
    assert settings["sparsity"] == {"flows": ["extra"], "weight": 2e-3, "epsilon": 1e-6, "alpha": 100.0, "mode": "primal-dual"}
    assert settings["equilibrium"] == {"weight": 0.5, "at": {"q": 0.0, "p": 0.1}}
    assert "primal–dual" in (out / "report.md").read_text()
    assert main(["fit", str(model), "--data", str(data), "--sparsity", "nope", "--epochs", "1", "-o", str(tmp_path / "x")]) != 0
    assert "neither a declared output" in capsys.readouterr().err


def test_primal_dual_resume_is_exact(msd, tmp_path):
    """λ lives in the checkpoint: 2 epochs + --resume to 4 ends where 4 straight epochs end."""
    model, data = msd
    kw = dict(sparsity={"flows": ["extra"], "epsilon": 1e-4, "alpha": 300.0}, equilibrium={"weight": 0.1}, batch=8)
    straight = run_fit(str(model), None, _cfg(data, epochs=4, **kw), tmp_path / "a", progress=False, log=lambda _: None)
    run_fit(str(model), None, _cfg(data, epochs=4, **kw), tmp_path / "b", progress=False, log=lambda _: None, stop_after=2)
    resumed = run_fit(str(model), None, _cfg(data, epochs=4, **kw), tmp_path / "b", progress=False, log=lambda _: None,
                      resume=True)
    assert np.array_equal(straight["p"], resumed["p"])
    lam = [json.loads(str(np.load(tmp_path / d / "checkpoint.npz")["header"]))["extra"]["regularizer"]["lambda"] for d in "ab"]
    assert lam[0] == lam[1] and len(set(lam[0])) > 1  # the multiplier moved, identically
