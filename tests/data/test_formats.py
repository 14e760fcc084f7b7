"""Parquet, HDF5 and MATLAB tables next to CSV, chosen by extension (pdsl/data/formats.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pdsl.cli.main import main
from pdsl.data.csvio import read_table, write_table

MODELS = Path(__file__).resolve().parents[2] / "models"
COLUMNS = ["t", "q1", "der(q1)", "b1.x", "K[1]"]


def _table():
    rng = np.random.default_rng(3)
    data = rng.normal(size=(7, len(COLUMNS)))
    data[:, 0] = np.arange(7) * 0.1
    data[2, 1] = 1e-300  # tiny and exact values survive
    return data


@pytest.mark.parametrize("suffix", [".parquet", ".h5", ".mat", ".csv"])
def test_round_trip_through_pdsl(tmp_path, suffix):
    data = _table()
    path = tmp_path / f"table{suffix}"
    write_table(path, COLUMNS, data)
    table = read_table(path)
    assert list(table.columns) == COLUMNS
    np.testing.assert_array_equal(table.data, data)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporaries left


def test_round_trip_through_the_standard_readers(tmp_path):
    import h5py
    import pandas as pd
    from scipy.io import loadmat

    data = _table()
    for suffix in (".parquet", ".h5", ".mat"):
        write_table(tmp_path / f"t{suffix}", COLUMNS, data)
    df = pd.read_parquet(tmp_path / "t.parquet")
    assert list(df.columns) == COLUMNS
    np.testing.assert_array_equal(df.to_numpy(), data)
    with h5py.File(tmp_path / "t.h5", "r") as f:
        assert [str(c) for c in f.attrs["columns"]] == COLUMNS or [c.decode() for c in f.attrs["columns"]] == COLUMNS
        for k, name in enumerate(COLUMNS):
            np.testing.assert_array_equal(f[name][...], data[:, k])
    m = loadmat(tmp_path / "t.mat")
    assert [str(c[0]) for c in m["columns"].ravel()] == COLUMNS
    np.testing.assert_array_equal(m["data"], data)


def test_foreign_files_are_read(tmp_path):
    """Files written by other tools: a pandas Parquet, per-column HDF5 datasets, MATLAB column vectors."""
    import h5py
    import pandas as pd
    from scipy.io import savemat

    pd.DataFrame({"t": [0.0, 0.5], "x": [1.0, 2.0]}).to_parquet(tmp_path / "a.parquet")
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f["t"] = [0.0, 0.5]
        f["x"] = [1.0, 2.0]
    savemat(tmp_path / "a.mat", {"t": np.array([[0.0], [0.5]]), "x": np.array([[1.0], [2.0]])})
    for name in ("a.parquet", "a.h5", "a.mat"):
        table = read_table(tmp_path / name)
        assert sorted(table.columns) == ["t", "x"]
        np.testing.assert_array_equal(table.column("x"), [1.0, 2.0])


def test_bad_files_are_located_errors(tmp_path, capsys):
    import pandas as pd

    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    pd.DataFrame({"t": [0.0, 1.0], "x": [1.0, np.nan]}).to_parquet(tmp_path / "nan.parquet")
    (tmp_path / "bad.mat").write_bytes(b"\x00" * 10)
    for name, expected in (("bad.parquet", "cannot read"), ("nan.parquet", "not a finite number"),
                           ("bad.mat", "cannot read"), ("missing.h5", "no such file")):
        code = main(["simulate", str(MODELS / "pendulum1.phm"), "--t-end", "1", "--dt", "0.5", "--init-data",
                     str(tmp_path / name), "-o", str(tmp_path / "o.csv")])
        err = capsys.readouterr().err
        assert code == 2, err
        assert expected in err and name in err and "Traceback" not in err


def test_simulate_writes_every_format(tmp_path, capsys):
    for suffix in (".csv", ".parquet", ".h5", ".mat"):
        out = tmp_path / f"dp{suffix}"
        assert main(["simulate", str(MODELS / "double_pendulum.phm"), "--t-end", "1", "--dt", "0.1",
                     "-o", str(out)]) == 0
    ref = read_table(tmp_path / "dp.csv")
    assert list(ref.columns) == ["t", "q1", "q2", "der(q1)", "der(q2)"]
    for suffix in (".parquet", ".h5", ".mat"):
        t = read_table(tmp_path / f"dp{suffix}")
        assert t.columns == ref.columns
        np.testing.assert_array_equal(t.data, ref.data)


def test_output_to_stdout_and_column_selection(tmp_path, capsys):
    assert main(["simulate", str(MODELS / "double_pendulum.phm"), "--t-end", "1", "--dt", "0.5", "-o", "-",
                 "--columns", "der(q1),q2"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == "t,der(q1),q2" and len(lines) == 4
    assert "DoublePendulum: 3 samples" in err and "DoublePendulum" not in out
    assert not Path("-").exists()
    code = main(["simulate", str(MODELS / "double_pendulum.phm"), "--t-end", "1", "--dt", "0.5", "-o",
                 str(tmp_path / "x.csv"), "--columns", "q3"])
    err = capsys.readouterr().err
    assert code == 2 and "no column `q3`" in err and "der(q1)" in err
    assert not (tmp_path / "x.csv").exists()


def test_random_init_columns_keep_traj(tmp_path):
    out = tmp_path / "r.parquet"
    assert main(["simulate", str(MODELS / "double_pendulum.phm"), "--t-end", "0.2", "--dt", "0.1", "--random-init", "2",
                 "-o", str(out), "--columns", "q1"]) == 0
    t = read_table(out)
    assert t.columns == ("traj", "t", "q1") and len(t.data) == 6
