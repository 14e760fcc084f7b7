"""`pdsl sweep`: grids, random samples, TOML lists; serial, process pool and Ray agree; resumable; fits per seed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from pdsl.cli.main import main
from pdsl.data.csvio import read_table
from pdsl.sweep import Member, SweepTask, grid_members, members_from_toml, random_members, run_sweep

MODELS = Path(__file__).resolve().parents[1] / "models"
SPRING = str(MODELS / "spring_pendulum.phm")


def _task(**kw) -> SweepTask:
    return SweepTask(model_path=SPRING, t_end=0.5, dt=0.05, rtol=1e-10, **kw)


def _members(n=4):
    return grid_members([("m1", list(np.linspace(0.5, 2.0, n)))])


def test_serial_sweep_writes_runs_and_summary(tmp_path, capsys):
    out = tmp_path / "sw"
    code = main(["sweep", SPRING, "--grid", "m1=0.5:2:4", "--t-end", "0.5", "--dt", "0.05", "--rtol", "1e-10",
                 "-o", str(out), "--plot"])
    assert code == 0, capsys.readouterr().err
    summary = read_table(out / "summary.csv")
    assert summary.columns[:3] == ("member", "seed", "m1") and len(summary.data) == 4
    np.testing.assert_allclose(summary.column("m1"), [0.5, 1.0, 1.5, 2.0])
    assert (out / "summary.png").stat().st_size > 1000
    # member 2 is `pdsl simulate --param m1=1.5`, column for column
    ref = tmp_path / "ref.csv"
    assert main(["simulate", SPRING, "--param", "m1=1.5", "--t-end", "0.5", "--dt", "0.05", "--rtol", "1e-10",
                 "-o", str(ref)]) == 0
    run = read_table(out / "runs" / "0002" / "trajectory.csv")
    np.testing.assert_array_equal(run.data, read_table(ref).data)
    assert summary.column("final:b2.vy")[2] == read_table(ref).column("b2.vy")[-1]


def test_resume_skips_finished_members(tmp_path):
    out = tmp_path / "sw"
    first = run_sweep(_task(), _members(), out, log=lambda *_: None)
    assert first["ran"] == 4
    again = run_sweep(_task(), _members(), out, log=lambda *_: None)
    assert again["ran"] == 0 and again["skipped"] == 4
    np.testing.assert_array_equal(first["rows"], again["rows"])
    assert first["columns"] == again["columns"]
    (out / "runs" / "0001" / "member.json").unlink()  # as if killed while member 1 ran
    third = run_sweep(_task(), _members(), out, log=lambda *_: None)
    assert third["ran"] == 1
    np.testing.assert_array_equal(first["rows"], third["rows"])


def test_another_sweep_in_the_same_directory_is_refused(tmp_path, capsys):
    out = tmp_path / "sw"
    run_sweep(_task(), _members(2), out, log=lambda *_: None)
    code = main(["sweep", SPRING, "--grid", "m1=0.5:2:3", "--t-end", "0.5", "--dt", "0.05", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "holds another sweep" in err


def test_user_errors(tmp_path, capsys):
    base = ["sweep", SPRING, "--t-end", "0.5", "--dt", "0.05", "-o", str(tmp_path / "x")]
    for extra, text in ((["--grid", "mass=1,2"], "no parameter `mass`"),
                        (["--grid", "m1=1:2"], "START:STOP:COUNT"),
                        (["--random", "m1=1:2"], "--samples"),
                        (["--grid", "m1=1,2", "--random", "m2=1:2", "--samples", "2"], "exactly one"),
                        (["--grid", "m1=1,2", "--executor", "dask"], "invalid choice")):
        code = main([*base, *extra])
        err = capsys.readouterr().err
        assert code == 2 and text in err and "Traceback" not in err, (extra, err)
    assert not (tmp_path / "x").exists()


def test_random_and_toml_members(tmp_path):
    a = random_members([("m1", 0.5, 2.0), ("m2", 0.1, 0.2)], 5, seed=3)
    b = random_members([("m1", 0.5, 2.0), ("m2", 0.1, 0.2)], 5, seed=3)
    assert a == b and [m.seed for m in a] == [3, 4, 5, 6, 7]
    assert all(0.5 <= m.params["m1"] <= 2.0 and 0.1 <= m.params["m2"] <= 0.2 for m in a)
    toml = tmp_path / "m.toml"
    toml.write_text('[[member]]\nm1 = 1\n"K[1]" = 2.5\n\n[[member]]\nm1 = 2.0\nseed = 11\n')
    assert members_from_toml(toml, seed=4) == [Member({"m1": 1.0, "K[1]": 2.5}, 4), Member({"m1": 2.0}, 11)]
    toml.write_text('[[member]]\nm1 = "heavy"\n')
    with pytest.raises(Exception, match="finite number"):
        members_from_toml(toml)


def test_process_pool_matches_serial(tmp_path):
    serial = run_sweep(_task(), _members(), tmp_path / "a", log=lambda *_: None)
    pool = run_sweep(_task(), _members(), tmp_path / "b", workers=2, log=lambda *_: None)
    assert serial["columns"] == pool["columns"]
    np.testing.assert_array_equal(serial["rows"], pool["rows"])
    assert (tmp_path / "a" / "summary.csv").read_bytes() == (tmp_path / "b" / "summary.csv").read_bytes()


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed (pdsl[ray])")
def test_ray_matches_serial(tmp_path):
    serial = run_sweep(_task(), _members(6), tmp_path / "a", log=lambda *_: None)
    on_ray = run_sweep(_task(), _members(6), tmp_path / "b", executor="ray", workers=2, log=lambda *_: None)
    assert on_ray["ran"] == 6
    np.testing.assert_array_equal(serial["rows"], on_ray["rows"])
    assert (tmp_path / "a" / "summary.csv").read_bytes() == (tmp_path / "b" / "summary.csv").read_bytes()
    for k in range(6):
        run = f"runs/{k:04d}/trajectory.csv"
        assert (tmp_path / "a" / run).read_bytes() == (tmp_path / "b" / run).read_bytes()


def test_fit_sweep_is_deterministic_per_seed_and_resumable(tmp_path):
    data = tmp_path / "data.csv"
    assert main(["simulate", SPRING, "--param", "m1=1.3", "--param", "m2=0.7", "--random-init", "4",
                 "--random-scale", "0.5", "--seed", "1", "--t-end", "1", "--dt", "0.05", "--rtol", "1e-10",
                 "-o", str(data)]) == 0
    fit = {"data": str(data), "free": ["m1", "m2"], "epochs": 8, "method": "gauss-newton"}
    task = SweepTask(model_path=SPRING, mode="fit", fit=fit)
    members = [Member({"m1": 1.0, "m2": 1.0}, 0), Member({"m1": 2.0, "m2": 0.5}, 5)]
    a = run_sweep(task, members, tmp_path / "a", log=lambda *_: None)
    b = run_sweep(task, members, tmp_path / "b", log=lambda *_: None)
    np.testing.assert_array_equal(a["rows"], b["rows"])
    cols = a["columns"]
    fitted = a["rows"][:, [cols.index("fit:m1"), cols.index("fit:m2")]]
    np.testing.assert_allclose(fitted, [[1.3, 0.7], [1.3, 0.7]], rtol=2e-3)
    params = json.loads((tmp_path / "a" / "runs" / "0001" / "fit" / "params.json").read_text())
    assert params["values"]["m1"] == pytest.approx(fitted[1, 0])
    assert run_sweep(task, members, tmp_path / "a", log=lambda *_: None)["ran"] == 0
