"""Declared initial-state samplers for ``simulate --random-init`` (pdsl/sim/sampling.py, BENCHMARKS A3.x).

* draws follow the declared distributions (moments, seeded, reproducible);
* mapped and projected states lie on the constraint manifold (Φ = 0, Φ̇ = 0) and carry the
  declared distribution through the map (angles recovered from Cartesian states);
* every bundled A3 model has a sampler beside it (FILE.sample) that `--random-init` uses; its
  draws follow A3.1–A3.5 (checked per system), exact maps land on the manifold before projection;
* statements are parsed by the model parser (never eval), and mistakes are located errors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from pdsl.cli.main import main
from pdsl.data.csvio import read_table
from pdsl.diagnostics import PdslError
from pdsl.pipeline import compile_model
from pdsl.sim.initial import Projector, sampled_initial_states
from pdsl.sim.sampling import build_sampler, statements_from_file, statements_from_options

MODELS = Path(__file__).resolve().parents[2] / "models"
_CACHE: dict = {}


def compiled(name: str, formulation: str = "hamiltonian"):
    if (name, formulation) not in _CACHE:
        _CACHE[(name, formulation)] = compile_model(MODELS / f"{name}.phm", formulation=formulation)
    return _CACHE[(name, formulation)]


def sampler_of(c, statements):
    return build_sampler(statements, c.numeric, c.numeric.p_default, c.model.consts, "test")


def draw(name, n, seed=1, formulation="hamiltonian", statements=None):
    c = compiled(name, formulation)
    num = c.numeric
    statements = statements if statements is not None else statements_from_file(MODELS / f"{name}.sample")
    return num, sampled_initial_states(num, sampler_of(c, statements), num.x_start, num.p_default, n, seed)


def worst_invariant(num, X) -> float:
    proj = Projector(num)
    return max(float(np.abs(proj.residual(x, num.p_default)).max()) for x in X)


def close(sample, mean, var, n, k=4.0):
    """Sample mean within k standard errors; sample variance within k of its standard error (normal-ish)."""
    assert abs(np.mean(sample) - mean) <= k * np.sqrt(var / n), (np.mean(sample), mean)
    assert abs(np.var(sample) - var) <= k * var * np.sqrt(2.0 / n) + 1e-12, (np.var(sample), var)


# ---------------------------------------------------------------------------------------------- the draws
def test_draws_have_the_declared_moments_and_are_seeded():
    c = compiled("pendulum1")
    smp = sampler_of(c, statements_from_options([
        "b[1].x = normal(1, 2)",
        "b[1].y = uniform(-1, 3)",
        "s = choice(-1, 1)",
        "b[1].vx = s*normal(0, 1) + 0.5*s",            # a mixture: mean 0, variance 1.25
        "z[1..2] = normal(0, 1)",
        "b[1].vy = z[1] - z[2]",                       # two distinct draws: variance 2
    ]))
    n = 20000
    v = smp.sample(n, seed=3)
    close(v["b[1].x"], 1.0, 4.0, n)
    close(v["b[1].y"], 1.0, 16.0 / 12.0, n)
    assert v["b[1].y"].min() >= -1 and v["b[1].y"].max() <= 3
    close(v["b[1].vx"], 0.0, 1.25, n)
    close(v["b[1].vy"], 0.0, 2.0, n)
    again = smp.sample(n, seed=3)
    assert all(np.array_equal(v[k], again[k]) for k in v)
    assert not np.array_equal(v["b[1].x"], smp.sample(n, seed=4)["b[1].x"])
    assert len(smp.draws) == 6  # normal, uniform, choice, normal, two for z[1..2]


@pytest.mark.parametrize("formulation", ["hamiltonian", "lagrangian"])
def test_angle_sampler_lands_on_the_manifold_with_the_declared_distribution(formulation):
    """θ ~ U(−π/2, π/2), ω ~ N(0.5, 2²) mapped to the Cartesian pendulum: recovered exactly."""
    n = 2000
    num, S = draw("pendulum1", n, seed=5, formulation=formulation, statements=statements_from_options([
        "th = uniform(-pi/2, pi/2)",
        "w = normal(0.5, 2)",
        "b[1] = l[1]*[sin(th), -cos(th)]",
        "b[1].v = l[1]*w*[cos(th), sin(th)]",
    ]))
    assert worst_invariant(num, S.x) <= 1e-12
    assert S.max_change <= 1e-12  # the map is exact: projection has nothing to do
    shown = np.array([np.asarray(num.report(0, x, num.p_default)).ravel() for x in S.x])
    x, y, vx, vy = shown.T
    th = np.arctan2(x, -y)
    w = (x * vy - y * vx) / (x**2 + y**2)
    close(th, 0.0, np.pi**2 / 12, n)
    assert th.min() >= -np.pi / 2 and th.max() <= np.pi / 2
    close(w, 0.5, 4.0, n)


# ---------------------------------------------------------------------------------------------- bundled A3 samplers
A3 = ["pendulum1", "pendulum2", "pendulum3", "pendulum5", "pendulum_chain", "coupled_pendulums", "magnet_pendulum",
      "gyroscope", "rigid_rotor"]
EXACT = {"coupled_pendulums", "magnet_pendulum", "gyroscope", "rigid_rotor"}  # no perturbation before projection


@pytest.mark.parametrize("name", A3)
def test_every_a3_model_has_a_sampler_whose_states_are_on_the_manifold(name):
    num, S = draw(name, 40)
    assert worst_invariant(num, S.x) <= 1e-10
    if name in EXACT:
        assert worst_invariant(num, S.raw) <= 1e-12
    else:  # A3.1: perturbed by 0.2 N(0,1) (positions) and 3·0.4 N(0,1) (velocities), then projected
        assert S.max_change > 0.1


def test_a3_1_pendulum_angles_and_rates():
    """A3.1: q, q̇ ~ N(0, 1), then perturbation and projection: angles keep mean 0, spread ~1."""
    n = 300
    num, S = draw("pendulum3", n, formulation="lagrangian")
    X = S.x[:, :6].reshape(n, 3, 2)
    d = X - np.concatenate([np.zeros((n, 1, 2)), X[:, :-1]], axis=1)
    q = np.arctan2(d[..., 0], -d[..., 1])
    assert np.all(np.abs(q.mean(axis=0)) <= 0.2) and np.all((q.std(axis=0) > 0.8) & (q.std(axis=0) < 1.35))
    lengths = np.sqrt((d**2).sum(-1))
    assert np.abs(lengths - [1.1167, 0.9389, 1.0359]).max() <= 1e-10


def test_a3_2_and_a3_3_hang_near_straight_down():
    n = 400
    num, S = draw("coupled_pendulums", n)
    off = S.x[:, :9].reshape(n, 3, 3) - np.array([[0.0, 0, 0], [1, 0, 0], [2, 0, 0]])
    for axis in (0, 1):  # sin θ sin φ ≈ −δφ and cos θ ≈ −δθ with δ ~ 0.3 N(0, 1)
        assert np.all(np.abs(off[:, :, axis].mean(axis=0)) <= 0.06)
        assert np.all(np.abs(off[:, :, axis].std(axis=0) - 0.28) <= 0.04)
    assert np.all(off[:, :, 2] < 0)
    num, S = draw("magnet_pendulum", n)
    bob = S.x[:, :3]
    assert abs(bob[:, 0].std() - 0.28) <= 0.04 and abs(bob[:, 1].std() - 0.2) <= 0.03 and np.all(bob[:, 2] < 0)
    v = np.array([np.asarray(num.report(0, x, num.p_default)).ravel()[3:] for x in S.x])
    assert abs(v[:, 1].std() - 0.4) <= 0.05 and abs(v[:, 0].std() - 0.05) <= 0.01  # polar / azimuth rates


def test_a3_4_gyroscope_euler_angles_rates_and_pivot():
    """ZXZ angles U(−1.5, 1.5), ph' U(−4.5, 4.5), th' U(−0.3, 0.3), ps' = ±1.5(7 + N); pivot at rest at 0."""
    n = 1000
    num, S = draw("gyroscope", n, formulation="lagrangian")
    X, V = S.x[:, :12].reshape(n, 4, 3), S.x[:, 12:].reshape(n, 4, 3)
    R = np.transpose(X[:, 1:] - X[:, :1], (0, 2, 1))
    Rd = np.transpose(V[:, 1:] - V[:, :1], (0, 2, 1))
    l = 0.22173
    assert np.abs(X[:, 0] - l * R[:, :, 2]).max() <= 1e-14  # pivot top.at([0, 0, −l]) at the origin
    assert np.abs(V[:, 0] - l * Rd[:, :, 2]).max() <= 1e-13  # ... at rest
    ph, th, ps = Rotation.from_matrix(R).as_euler("ZXZ").T  # scipy returns θ ≥ 0: (φ+π, −θ, ψ+π) for θ < 0
    close(th, 0.75, 0.1875, n)  # |θ| ~ U(0, 1.5)
    W = np.einsum("nji,njk->nik", R, Rd)
    om = np.stack([W[:, 2, 1], W[:, 0, 2], W[:, 1, 0]], axis=1)
    dph = (om[:, 0] * np.sin(ps) + om[:, 1] * np.cos(ps)) / np.sin(th)
    dth = om[:, 0] * np.cos(ps) - om[:, 1] * np.sin(ps)
    dps = om[:, 2] - dph * np.cos(th)
    close(dph, 0.0, 9.0**2 / 12, n)
    assert np.abs(dph).max() <= 4.5 and np.abs(dth).max() <= 0.3
    close(np.abs(dps), 10.5, 1.5**2, n)
    assert abs(np.mean(dps > 0) - 0.5) <= 4 * 0.5 / np.sqrt(n)


def test_a3_5_rotor_centre_is_clipped_and_scaled():
    n = 1000
    num, S = draw("rigid_rotor", n)
    z = np.random.default_rng(0).standard_normal(200_000)
    sd = 0.1 * np.clip(2 * z, -3, 3).std()  # 0.1·std(clip(2N(0,1), −3, 3)) ≈ 0.175
    centre = S.x[:, :3]
    assert np.abs(centre).max() <= 0.3 + 1e-12
    assert np.all(np.abs(centre.std(axis=0) - sd) <= 4 * sd / np.sqrt(2 * n))
    assert np.all(np.abs(centre.mean(axis=0)) <= 4 * sd / np.sqrt(n))


# ---------------------------------------------------------------------------------------------- CLI
def test_cli_random_init_uses_the_sampler_beside_the_model(tmp_path, capsys):
    out = tmp_path / "g.csv"
    assert main(["simulate", str(MODELS / "gyroscope.phm"), "--random-init", "3", "--t-end", "0.2", "--dt", "0.02",
                 "--rtol", "1e-6", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "drawn by" in text and "gyroscope.sample" in text
    table = read_table(out)
    assert sorted(set(table.column("traj"))) == [0.0, 1.0, 2.0]
    # --random-scale chooses the generic perturbation instead
    assert main(["simulate", str(MODELS / "gyroscope.phm"), "--random-init", "2", "--t-end", "0.2", "--dt", "0.02",
                 "--rtol", "1e-6", "-o", str(out), "--random-scale", "0.01", "--init", "top.z=0.22173",
                 "--init", "top.a1.x=1", "--init", "top.a1.z=0.22173", "--init", "top.a2.y=1", "--init", "top.a2.z=0.22173",
                 "--init", "top.a3.z=1.22173"]) == 0
    assert "0.01·N(0, 1)" in capsys.readouterr().out


def test_cli_sample_options(tmp_path, capsys):
    out = tmp_path / "p.csv"
    args = ["simulate", str(MODELS / "pendulum1.phm"), "--random-init", "4", "--t-end", "0.3", "--dt", "0.1",
            "-o", str(out), "--sample", "th = uniform(-pi/2, pi/2)", "--sample", "b[1] = l[1]*[sin(th), -cos(th)]"]
    assert main(args) == 0
    assert "drawn by --sample" in capsys.readouterr().out
    table = read_table(out)
    x, y = table.column("b[1].x"), table.column("b[1].y")
    assert np.abs(np.hypot(x, y) - 1.1722).max() <= 1e-6


def _cli_error(capsys, *extra, model="pendulum1"):
    code = main(["simulate", str(MODELS / f"{model}.phm"), "--t-end", "0.1", "--dt", "0.1", "-o", "/dev/null", *extra])
    assert code == 2
    return capsys.readouterr().err


def test_bad_sampling_statements_are_located_errors(tmp_path, capsys):
    err = _cli_error(capsys, "--random-init", "2", "--sample", "b[4].x = 1")
    assert "--sample #1:1:1: error[UnknownName]" in err and "not a state" in err
    err = _cli_error(capsys, "--random-init", "2", "--sample", "b[1].x = 1", "--sample", "qq = normal(0, 1)")
    assert "--sample #2:1:1: error[BadSample]" in err and "never used" in err
    err = _cli_error(capsys, "--random-init", "2", "--sample", "b[1].xx = normal(0, 1)")
    assert "error[UnknownName]" in err and "b[1].x" in err  # did you mean
    err = _cli_error(capsys, "--random-init", "2", "--sample", "b[1].x = normal(0, -1)")
    assert "error[BadSample]" in err and "sigma" in err
    err = _cli_error(capsys, "--random-init", "2", "--sample", "b[1].x = __import__('os')")
    assert "error[" in err and "--sample #1" in err
    err = _cli_error(capsys, "--random-init", "2", "--sample", "b[1].x = b[1].y")
    assert "error[" in err
    err = _cli_error(capsys, "--random-init", "2", "--sample", "b[1].x = gauss(0, 1)")
    assert "error[UnknownFunction]" in err
    err = _cli_error(capsys, "--random-init", "2", "--sample", "b[1].x = 1", "--random-scale", "0.1")
    assert "error[BadOption]" in err and "--random-scale" in err
    err = _cli_error(capsys, "--sample", "b[1].x = 1")
    assert "error[BadOption]" in err and "--random-init" in err
    bad = tmp_path / "bad.sample"
    bad.write_text("# a comment\nq = normal(0, 1)\nb[1].x = l[1]*sin(q) + undefined_name\n")
    err = _cli_error(capsys, "--random-init", "2", "--sample-file", str(bad))
    assert f"{bad}:3:" in err and "error[UnknownName]" in err and "undefined_name" in err
    assert "b[1].x = l[1]*sin(q) + undefined_name" in err  # the source line is quoted
    err = _cli_error(capsys, "--random-init", "2", "--sample-file", str(tmp_path / "missing.sample"))
    assert "error[FileNotFound]" in err


def test_statement_forms():
    c = compiled("pendulum3")
    smp = sampler_of(c, statements_from_options([
        "q[i] = 0.1*i + normal(0, 0) for i in 1..N",   # element definitions, loop bound from the const N
        "b[i].x = q[i] for i in 1..N",
        "b[i].y = -1 - i for i in 1..3",
        "b[i].v = [i, 2*i] for i in 1..N",             # vectors on the velocity columns
    ]))
    v = smp.sample(2, seed=0)
    assert np.allclose(v["b[2].x"], 0.2) and np.allclose(v["b[3].y"], -4) and np.allclose(v["b[3].vy"], 6)
    with pytest.raises(PdslError) as e:
        sampler_of(c, statements_from_options(["b[1].x = 1", "b[1].x = 2"]))
    assert e.value.codes == ["DuplicateDefinition"]
    with pytest.raises(PdslError) as e:
        sampler_of(c, statements_from_options(["g = normal(0, 1)", "b[1].x = g"]))  # g is a parameter
    assert e.value.codes == ["DuplicateDefinition"]
    with pytest.raises(PdslError) as e:
        sampler_of(c, statements_from_options(["b[1] = [1, 2, 3]"]))
    assert e.value.codes == ["TypeMismatch"]
