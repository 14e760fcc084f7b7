"""Trajectory CSV checks: every error names file, row and column (BadTrajectoryData / BadCsv)."""

import csv

import numpy as np
import pytest

from pdsl.diagnostics import PdslError, render
from pdsl.fit.data import load_dataset, make_chunks, split_validation
from pdsl.pipeline import compile_model


@pytest.fixture(scope="module")
def num(spring_model):
    return compile_model(spring_model).numeric


@pytest.fixture
def rows(small_spring_data):
    with open(small_spring_data) as fh:
        return list(csv.reader(fh))


def write(tmp_path, rows, name="bad.csv"):
    path = tmp_path / name
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    return str(path)


def fails(path, num, code, line, col_name=None, **kw):
    with pytest.raises(PdslError) as e:
        load_dataset(path, num, **kw)
    d = e.value.diagnostics[0]
    assert d.code == code
    assert d.span is not None and d.span.path == path and d.span.line == line
    if col_name is not None:
        lines = open(path).read().splitlines()
        k = lines[0].split(",").index(col_name)
        col = 1 + sum(len(c) + 1 for c in lines[line - 1].split(",")[:k])
        assert d.span.col == col
    assert f"{path}:{line}:" in render(e.value.diagnostics)
    return d


def test_reads_what_simulate_writes(small_spring_data, num):
    ds = load_dataset(str(small_spring_data), num, min_samples=5)
    assert len(ds.trajectories) == 4 and ds.dt == pytest.approx(0.03)
    assert ds.observed == num.report_names and ds.shown == num.report_names
    assert all(len(tr) == 21 for tr in ds.trajectories)
    ch = make_chunks(ds, 4)
    assert len(ch) == 4 * 5 and ch.Y.shape == (20, 8, 4) and ch.T.shape == (20, 5)
    np.testing.assert_array_equal(ch.S0[1], ds.trajectories[0].S[4])
    np.testing.assert_array_equal(ch.Y[1][:, 0], ds.trajectories[0].S[5])
    assert len(make_chunks(ds, 4, stride=1)) == 4 * 17


def test_subset_of_columns_is_observed(small_spring_data, num):
    ds = load_dataset(str(small_spring_data), num, observe=["b2.x", "b2.y"])
    assert ds.observed == ("b2.x", "b2.y")
    fails(str(small_spring_data), num, "BadTrajectoryData", 1, observe=["b3.x"])


def test_unknown_column(tmp_path, rows, num):
    rows[0][rows[0].index("b1.vx")] = "b1.vz"
    d = fails(write(tmp_path, rows), num, "BadTrajectoryData", 1, "b1.vz")
    assert "b1.vz" in d.message and "b1.vx" in d.hint


def test_missing_state_column(tmp_path, rows, num):
    k = rows[0].index("b2.vy")
    d = fails(write(tmp_path, [r[:k] + r[k + 1 :] for r in rows]), num, "BadTrajectoryData", 1)
    assert "b2.vy" in d.message


def test_missing_time_column(tmp_path, rows, num):
    k = rows[0].index("t")
    d = fails(write(tmp_path, [r[:k] + r[k + 1 :] for r in rows]), num, "BadTrajectoryData", 1)
    assert "`t`" in d.message


def test_nan_is_located(tmp_path, rows, num):
    rows[7][rows[0].index("b1.y")] = "nan"
    fails(write(tmp_path, rows), num, "BadCsv", 8, "b1.y")


def test_time_must_increase_within_a_trajectory(tmp_path, rows, num):
    k = rows[0].index("t")
    rows[5][k] = rows[4][k]
    d = fails(write(tmp_path, rows), num, "BadTrajectoryData", 6, "t")
    assert "does not increase" in d.message


def test_trajectory_too_short_for_the_chunk(tmp_path, rows, num):
    traj = rows[0].index("traj")
    short = [rows[0]] + [r for r in rows[1:] if float(r[traj]) != 1.0 or float(r[rows[0].index("t")]) < 0.1]
    first = next(i for i, r in enumerate(short) if i and float(r[traj]) == 1.0) + 1
    d = fails(write(tmp_path, short), num, "BadTrajectoryData", first, "traj", min_samples=5)
    assert "trajectory 1" in d.message and "4 samples" in d.message


def test_non_uniform_sampling(tmp_path, rows, num):
    k = rows[0].index("t")
    rows[9][k] = repr(float(rows[9][k]) + 0.004)
    d = fails(write(tmp_path, rows), num, "BadTrajectoryData", 10, "t")
    assert "sampling interval" in d.message


def test_sampling_must_agree_across_trajectories(tmp_path, rows, num):
    k, traj = rows[0].index("t"), rows[0].index("traj")
    for r in rows[1:]:
        if float(r[traj]) == 2.0:
            r[k] = repr(2 * float(r[k]))
    first = next(i for i, r in enumerate(rows) if i and r[traj] == "2.0") + 2
    fails(write(tmp_path, rows), num, "BadTrajectoryData", first, "t")


def test_trajectory_rows_must_be_contiguous(tmp_path, rows, num):
    traj = rows[0].index("traj")
    body = rows[1:]
    moved = body[:3] + body[25:30] + body[3:25] + body[30:]
    d = fails(write(tmp_path, [rows[0]] + moved), num, "BadTrajectoryData", 2 + 3 + 5, "traj")
    assert "continues" in d.message


def test_missing_input_column(tmp_path):
    model = tmp_path / "cart.phm"
    model.write_text("model Cart\n  param m = 2.0\n  input F\n  var x, v\n  der(x) = v\n  der(v) = F/m\nend\n")
    num = compile_model(model).numeric
    path = write(tmp_path, [["t", "x", "v"], ["0", "0", "0"], ["0.1", "0", "0"]])
    d = fails(path, num, "BadTrajectoryData", 1)
    assert "input column `F`" in d.message


def test_validation_split_is_by_trajectory_and_seeded(spring_data, num):
    ds = load_dataset(str(spring_data), num)
    train, val = split_validation(ds, 0.2, seed=3)
    assert len(val.trajectories) == 4 and len(train.trajectories) == 16
    assert {t.label for t in train.trajectories}.isdisjoint({t.label for t in val.trajectories})
    again = split_validation(ds, 0.2, seed=3)[1]
    assert [t.label for t in again.trajectories] == [t.label for t in val.trajectories]
    assert [t.label for t in split_validation(ds, 0.2, seed=4)[1].trajectories] != [t.label for t in val.trajectories]
    assert len(split_validation(ds, 0.0, seed=0)[1].trajectories) == 0
