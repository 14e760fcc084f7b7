"""CSV writing: atomic (nothing half-written) and with the permissions of a plain open()."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from pdsl.data.csvio import atomic_path, read_table, write_table


def test_written_file_has_umask_permissions_and_round_trips(tmp_path):
    old = os.umask(0o022)
    try:
        path = tmp_path / "out.csv"
        data = np.array([[0.0, 1.0 / 3.0], [0.1, -2.5e-300]])
        write_table(path, ["t", "x"], data)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    table = read_table(path)
    assert table.columns == ("t", "x") and np.array_equal(table.data, data)  # repr: bit-exact


def test_failure_leaves_the_previous_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.csv"
    path.write_text("t,x\n0,1\n")
    with pytest.raises(RuntimeError):
        with atomic_path(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("interrupted")
    assert path.read_text() == "t,x\n0,1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]
