"""Initial-state projection, shown columns, drift stabilisation and batch simulation."""

import numpy as np
import pytest

from pdsl.cli.main import main
from pdsl.data.csvio import read_table
from pdsl.pipeline import compile_model
from pdsl.sim.initial import Projector, random_initial_states
from pdsl.sim.simulate import simulate, simulate_batch, time_grid

CHAIN = """
model DoublePendulum "planar chain of two point masses"
  space 2
  param m1 = 1.3, m2 = 0.7, l1 = 1.0, l2 = 1.2, g = 9.81
  body b1 = point(mass = m1)
  body b2 = point(mass = m2)
  link ground, b1, length = l1
  link b1, b2, length = l2
  gravity g
end
"""

ANGLES = """
model DP
  param m1 = 1.3, m2 = 0.7, l1 = 1.0, l2 = 1.2, g = 9.81
  coord q1, q2
  lagrangian (m1 + m2)/2*l1^2*der(q1)^2 + m2/2*l2^2*der(q2)^2 + m2*l1*l2*cos(q1 - q2)*der(q1)*der(q2) + (m1 + m2)*g*l1*cos(q1) + m2*g*l2*cos(q2)
end
"""


@pytest.fixture(params=["hamiltonian", "lagrangian"])
def chain(tmp_path, request):
    path = tmp_path / "chain.phm"
    path.write_text(CHAIN)
    return compile_model(path, formulation=request.param)


def _cartesian_from_angles(q, qd, l1=1.0, l2=1.2):
    x1 = np.array([l1 * np.sin(q[0]), -l1 * np.cos(q[0])])
    x2 = x1 + np.array([l2 * np.sin(q[1]), -l2 * np.cos(q[1])])
    v1 = l1 * qd[0] * np.array([np.cos(q[0]), np.sin(q[0])])
    v2 = v1 + l2 * qd[1] * np.array([np.cos(q[1]), np.sin(q[1])])
    return x1, x2, v1, v2


def test_projection_is_minimal_and_reaches_the_manifold(chain):
    num = chain.numeric
    proj = Projector(num)
    rng = np.random.default_rng(0)
    for _ in range(10):
        x0 = rng.normal(size=num.nx)
        res = proj.project(x0, num.p_default)
        assert np.sqrt(np.mean(proj.residual(res.x, num.p_default) ** 2)) <= 1e-12
        # already-consistent states are left alone
        again = proj.project(res.x, num.p_default)
        assert np.allclose(again.x, res.x, atol=1e-14) and again.iterations == 0


def test_cartesian_matches_angle_model_through_shown_columns(tmp_path, chain):
    """Same motion from both routes; the CSV shows velocities in either formulation."""
    q0, qd0 = np.array([0.7, -0.4]), np.array([0.3, 1.1])
    x1, x2, v1, v2 = _cartesian_from_angles(q0, qd0)
    init = {"b1.x": x1[0], "b1.y": x1[1], "b2.x": x2[0], "b2.y": x2[1],
            "b1.vx": v1[0], "b1.vy": v1[1], "b2.vx": v2[0], "b2.vy": v2[1]}
    grid = time_grid(2.0, 0.1)
    res = simulate(chain.numeric, grid, x0=init, rtol=1e-11)
    assert not res.info["projection"].changes  # a consistent start is not moved
    path = tmp_path / "dp.phm"
    path.write_text(ANGLES)
    ang = compile_model(path).numeric
    ref = simulate(ang, grid, x0={"q1": q0[0], "q2": q0[1], "der(q1)": qd0[0], "der(q2)": qd0[1]}, rtol=1e-11)
    names, data = res.columns()
    assert names[:9] == ["t", "b1.x", "b1.y", "b2.x", "b2.y", "b1.vx", "b1.vy", "b2.vx", "b2.vy"]
    for row, (q1, q2, w1, w2) in zip(data, ref.x):
        x1, x2, v1, v2 = _cartesian_from_angles([q1, q2], [w1, w2])
        assert np.max(np.abs(row[1:9] - np.concatenate([x1, x2, v1, v2]))) <= 1e-7


def test_inconsistent_start_is_projected_and_reported(chain):
    res = simulate(chain.numeric, time_grid(0.5, 0.1), x0={"b1.x": 1.0, "b2.x": 2.3, "b2.vy": 0.5})
    changed = {name for name, _, _ in res.info["projection"].changes}
    assert "b2.x" in changed
    assert res.constraint_rms[0] <= 1e-12


def test_stabilize_project_removes_drift(chain):
    grid = time_grid(3.0, 0.05)
    init = {"b1.x": 1.0, "b2.x": 2.2, "b1.vy": 0.4}
    loose = simulate(chain.numeric, grid, x0=init, rtol=1e-5)
    fixed = simulate(chain.numeric, grid, x0=init, rtol=1e-5, stabilize="project")
    assert fixed.constraint_rms.max() <= 1e-10
    assert loose.constraint_rms.max() > 100 * fixed.constraint_rms.max()


def test_batch_equals_single_runs(chain):
    num = chain.numeric
    p = num.p_default
    base = np.zeros(num.nx)
    base[[0, 2]] = [1.0, 2.2]
    x0s = random_initial_states(num, base, p, 5, seed=3, scale=0.2)
    grid = time_grid(1.0, 0.05)
    batch = simulate_batch(num, grid, x0s, rtol=1e-10)
    for k in (0, 4):
        single = simulate(num, grid, x0=dict(zip(num.x_names, x0s[k])), rtol=1e-10, project=False)
        assert np.max(np.abs(batch[k].x - single.x)) <= 1e-7


def test_random_init_cli_writes_traj_column(tmp_path):
    path = tmp_path / "chain.phm"
    path.write_text(CHAIN)
    out = tmp_path / "r.csv"
    rc = main(["simulate", str(path), "--t-end", "1", "--dt", "0.1", "--init", "b1.x=1", "--init", "b2.x=2.2",
               "--random-init", "6", "--seed", "5", "-o", str(out)])
    assert rc == 0
    table = read_table(out)
    assert table.columns[:2] == ("traj", "t")
    assert sorted(set(table.column("traj"))) == [0, 1, 2, 3, 4, 5]
    # reproducible with the same seed
    out2 = tmp_path / "r2.csv"
    main(["simulate", str(path), "--t-end", "1", "--dt", "0.1", "--init", "b1.x=1", "--init", "b2.x=2.2",
          "--random-init", "6", "--seed", "5", "-o", str(out2)])
    assert out.read_text() == out2.read_text()


def test_fixed_step_batch_matches_single(tmp_path):
    path = tmp_path / "hh.phm"
    path.write_text("model HH\n  coord x = 0.1, y = -0.2\n  momentum px = 0.3, py = 0.2\n"
                    "  hamiltonian (px^2 + py^2)/2 + (x^2 + y^2)/2 + x^2*y - y^3/3\nend\n")
    num = compile_model(path).numeric
    x0s = num.x_start[None, :] + 0.05 * np.random.default_rng(0).normal(size=(3, 4))
    grid = time_grid(5.0, 0.1)
    batch = simulate_batch(num, grid, x0s, integrator="gauss2")
    for k in range(3):
        single = simulate(num, grid, x0=dict(zip(num.x_names, x0s[k])), integrator="gauss2")
        assert np.max(np.abs(batch[k].x - single.x)) <= 1e-12
        assert np.max(np.abs(batch[k].energy - batch[k].energy[0])) <= 1e-6


def test_init_data_csv_runs_one_trajectory_per_row(tmp_path):
    """simulate --init-data: rows are initial states (a subset of columns), each projected; located errors."""
    from pathlib import Path

    from pdsl.cli.main import main as cli
    from pdsl.data.csvio import read_table as _read

    models = Path(__file__).resolve().parents[2] / "models"
    init = tmp_path / "init.csv"
    init.write_text("q,p\n1.0,0.0\n0.5,0.3\n")
    out = tmp_path / "out.csv"
    assert cli(["simulate", str(models / "henon_heiles.phm"), "--init-data", str(init), "--t-end", "1", "--dt", "0.5",
                "-o", str(out)]) == 2  # henon_heiles has x, y, px, py: `q` is not a state
    init.write_text("x,py\n0.1,0.2\n-0.2,0.1\n0.0,0.3\n")
    assert cli(["simulate", str(models / "henon_heiles.phm"), "--init-data", str(init), "--init", "y=0.05",
                "--t-end", "1", "--dt", "0.5", "-o", str(out)]) == 0
    t = _read(out)
    first = t.data[t.data[:, t.columns.index("t")] == 0.0]
    assert list(first[:, t.columns.index("traj")]) == [0, 1, 2]
    assert list(first[:, t.columns.index("x")]) == [0.1, -0.2, 0.0] and list(first[:, t.columns.index("py")]) == [0.2, 0.1, 0.3]
    assert np.all(first[:, t.columns.index("y")] == 0.05)  # from --init
    # on a constrained model every row starts on the manifold
    init.write_text("b[1].x,b[1].y\n0.5,-0.8\n-0.3,-0.9\n")
    assert cli(["simulate", str(models / "pendulum1.phm"), "--init-data", str(init), "--t-end", "0.5", "--dt", "0.5",
                "-o", str(out)]) == 0
    t = _read(out)
    x, y = t.column("b[1].x")[t.column("t") == 0], t.column("b[1].y")[t.column("t") == 0]
    assert len(x) == 2 and np.all(np.abs(np.hypot(x, y) - 1.1722) < 1e-9)  # the link length
    assert cli(["simulate", str(models / "pendulum1.phm"), "--init-data", str(init), "--random-init", "2",
                "--t-end", "0.5", "--dt", "0.5", "-o", str(out)]) == 2
