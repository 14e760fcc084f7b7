"""Hostile CSV files and option values: every one a located user error (exit 2), never a traceback.

One reader (:func:`pdsl.data.csvio.read_table`) serves `fit`, `evaluate`, `simulate --input-data`
and `simulate --init-data`; these tests go through the command line of each.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from pdsl.cli.main import main
from pdsl.compile.targets import _module_name
from pdsl.data.csvio import read_table, strict_float
from pdsl.diagnostics import PdslError

REPO = Path(__file__).resolve().parents[2]
MSD = str(REPO / "models" / "mass_spring_damper.phm")  # states p, q; exogenous input F
LONG = "1" * 140_000  # longer than csv's default field limit (131072)
GOOD_ROWS = ["t,p,q,F", *[f"{k / 10:g},0.0,1.0,0" for k in range(6)]]


def _run(capsys, *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    text = out.out + out.err
    assert "Traceback" not in text and "internal error" not in text, text
    return rc, text


def _write(path: Path, lines: list[str] | str) -> str:
    path.write_text(lines if isinstance(lines, str) else "\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def _simulate_input(tmp_path, data: str, *extra: str) -> list[str]:
    return ["simulate", MSD, "--t-end", "0.5", "--dt", "0.1", "--input-data", data, "-o", str(tmp_path / "o.csv"), *extra]


# ---------------------------------------------------------------- 8. a field over csv's size limit
@pytest.mark.parametrize("command", ["fit", "evaluate", "init-data", "input-data"])
def test_a_huge_field_is_a_located_error(tmp_path, capsys, command):
    limit = csv.field_size_limit()
    if command == "init-data":
        data = _write(tmp_path / "x0.csv", ["q,p", "1,0", f"{LONG},0"])
        argv = ["simulate", MSD, "--input", "F=0", "--t-end", "0.5", "--dt", "0.1", "--init-data", data,
                "-o", str(tmp_path / "o.csv")]
        where = f"{data}:3:1:"
    elif command == "input-data":
        data = _write(tmp_path / "u.csv", ["t,F", "0,0", f"1,{LONG}"])
        argv = _simulate_input(tmp_path, data)
        where = f"{data}:3:3:"
    else:
        rows = list(GOOD_ROWS)
        rows[2] = f"0.1,{LONG},1.0,0"
        data = _write(tmp_path / "d.csv", rows)
        argv = [command, MSD, "--data", data] + (["--free", "k", "-o", str(tmp_path / "fit")] if command == "fit" else [])
        where = f"{data}:3:5:"
    rc, text = _run(capsys, *argv)
    assert rc == 2
    assert where in text and "error[BadCsv]" in text and "too long to be a number" in text
    assert "(140000 characters)" in text and len(text) < 2_000  # neither the message nor the quoted line is 140k long
    assert csv.field_size_limit() == limit  # raised for the one read only


def test_a_huge_column_name_is_located_and_quoted_short(tmp_path, capsys):
    data = _write(tmp_path / "d.csv", [f"t,{'q' * 140_000}", "0,1"])
    rc, text = _run(capsys, "evaluate", MSD, "--data", data)
    assert rc == 2 and f"{data}:1:3: error[BadTrajectoryData]: unknown column" in text and len(text) < 2_000


def test_the_real_command_on_a_huge_field(tmp_path):
    data = _write(tmp_path / "u.csv", ["t,F", "0,0", f"1,{LONG}"])
    proc = subprocess.run([sys.executable, "-m", "pdsl", *_simulate_input(tmp_path, data)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert f"{data}:3:3: error[BadCsv]" in proc.stderr and "Traceback" not in proc.stderr


# ---------------------------------------------------------------- 9. input data too short to interpolate
@pytest.mark.parametrize("lines, where", [(["t,F"], "1:1"), (["t,F", "0,1"], "2:1")])
def test_input_data_needs_two_rows(tmp_path, capsys, lines, where):
    data = _write(tmp_path / "u.csv", lines)
    rc, text = _run(capsys, *_simulate_input(tmp_path, data))
    assert rc == 2 and f"{data}:{where}: error[BadCsv]" in text and "at least 2 rows" in text and "hint:" in text


# ---------------------------------------------------------------- 11. strict numbers
@pytest.mark.parametrize("text, value", [("1", 1.0), ("-0.5", -0.5), (".5", 0.5), ("5.", 5.0), ("+3E+2", 300.0),
                                         (" 2 ", 2.0), ("1e-3", 1e-3), ("-0", 0.0)])
def test_strict_float_accepts_decimal_numbers(text, value):
    assert strict_float(text) == value


@pytest.mark.parametrize("text, reason", [("-0_9", "not a number"), ("1_000", "not a number"), ("0x10", "not a number"),
                                          ("", "not a number"), ("1e", "not a number"), ("١", "not a number"),
                                          ("inf", "not a finite number"), ("-Infinity", "not a finite number"),
                                          ("nan", "not a finite number"), ("1e999", "not a finite number"),
                                          ("1" * 1001, "too long to be a number")])
def test_strict_float_refuses(text, reason):
    with pytest.raises(ValueError, match=reason):
        strict_float(text)


@pytest.mark.parametrize("cell, message", [("-0_9", "`-0_9` in column `F` is not a number"),
                                           ("inf", "`inf` in column `F` is not a finite number"),
                                           ("nan", "`nan` in column `F` is not a finite number")])
def test_csv_cells_follow_the_strict_grammar(tmp_path, capsys, cell, message):
    data = _write(tmp_path / "u.csv", ["t,F", f"0,{cell}", "1,1"])
    rc, text = _run(capsys, *_simulate_input(tmp_path, data))
    assert rc == 2 and f"{data}:2:3: error[BadCsv]: {message}" in text


@pytest.mark.parametrize("option, value, message", [("--init", "q=-0_9", "--init q: `-0_9` is not a number"),
                                                    ("--param", "k=inf", "--param k: `inf` is not a finite number"),
                                                    ("--param", "k=nan", "--param k: `nan` is not a finite number")])
def test_option_values_follow_the_strict_grammar(tmp_path, capsys, option, value, message):
    rc, text = _run(capsys, "simulate", MSD, "--input", "F=0", "--t-end", "0.5", "--dt", "0.1", option, value,
                    "-o", str(tmp_path / "o.csv"))
    assert rc == 2 and f"error[BadOption]: {message}" in text


# ---------------------------------------------------------------- 11. numbers in messages are plain numbers
def test_messages_show_plain_numbers_not_numpy_reprs(tmp_path, capsys):
    data = _write(tmp_path / "d.csv", ["traj," + GOOD_ROWS[0], *("0.2," + r for r in GOOD_ROWS[1:])])
    rc, text = _run(capsys, "evaluate", MSD, "--data", data)
    assert rc == 2 and f"{data}:2:1: error[BadTrajectoryData]: traj 0.2 is not an integer" in text
    assert "np.float64" not in text
    rows = list(GOOD_ROWS)
    rows[3] = "0.1,0.0,1.0,0"  # t = 0.1 twice
    data = _write(tmp_path / "t.csv", rows)
    rc, text = _run(capsys, "evaluate", MSD, "--data", data)
    assert rc == 2 and "t = 0.1 after 0.1" in text and "np.float64" not in text


# ---------------------------------------------------------------- 11. byte-order mark
def test_a_utf8_byte_order_mark_is_dropped(tmp_path, capsys):
    path = tmp_path / "u.csv"
    path.write_text("t,F\n0,1\n1,1\n", encoding="utf-8-sig")
    assert read_table(path).columns == ("t", "F")
    rc, text = _run(capsys, *_simulate_input(tmp_path, str(path)))
    assert rc == 0, text


# ---------------------------------------------------------------- 11. input data: unknown columns, time range
def test_input_data_refuses_a_column_that_is_not_an_input(tmp_path, capsys):
    data = _write(tmp_path / "u.csv", ["t,F,G", "0,1,2", "1,1,2"])
    rc, text = _run(capsys, *_simulate_input(tmp_path, data))
    assert rc == 2 and f"{data}:1:5: error[BadCsv]: column `G` is not an exogenous input" in text
    assert "hint:" in text and "inputs: F" in text


@pytest.mark.parametrize("lines, where, message", [
    (["t,F", "0,1", "0.3,1"], "3:1", "input data ends at t = 0.3, before the simulation end t = 0.5"),
    (["t,F", "0.2,1", "1,1"], "2:1", "input data starts at t = 0.2, after the simulation start t = 0"),
    (["t,F", "0,1", "0,2", "1,1"], "3:1", "time does not increase"),
])
def test_input_data_must_cover_the_simulated_interval(tmp_path, capsys, lines, where, message):
    data = _write(tmp_path / "u.csv", lines)
    rc, text = _run(capsys, *_simulate_input(tmp_path, data))
    assert rc == 2 and f"{data}:{where}: error[BadCsv]: {message}" in text


# ---------------------------------------------------------------- 11. unreadable files are located too
def test_unreadable_files_are_located(tmp_path, capsys):
    empty = _write(tmp_path / "empty.csv", "")
    latin = tmp_path / "latin.csv"
    latin.write_bytes("t,F\n0,1\n1,\u00e91\n".encode("latin-1"))
    cases = [(empty, "1:1", "BadCsv", "is empty"), (str(tmp_path), "1:1", "BadCsv", "is a directory"),
             (str(tmp_path / "nope.csv"), "1:1", "FileNotFound", "no such file"),
             (str(latin), "3:3", "BadCsv", "byte 0xe9 is not UTF-8")]
    for path, where, code, message in cases:
        rc, text = _run(capsys, *_simulate_input(tmp_path, path))
        assert rc == 2 and f"{path}:{where}: error[{code}]: " in text and message in text, text
        with pytest.raises(PdslError):
            read_table(path)


# ---------------------------------------------------------------- 11. generated module names
@pytest.mark.parametrize("model, module", [("numpy", "numpy_model"), ("Math", "math_model"), ("Json", "json_model"),
                                           ("Casadi", "casadi_model"), ("Lambda", "lambda_model"),
                                           ("MassSpringDamper", "mass_spring_damper")])
def test_generated_module_names_shadow_nothing(model, module):
    assert _module_name(model) == module


def test_a_model_named_numpy_compiles_to_an_importable_module(tmp_path, capsys):
    src = Path(MSD).read_text().replace("model MassSpringDamper", "model numpy")
    model = _write(tmp_path / "numpy.phm", src)
    out = tmp_path / "out"
    rc, text = _run(capsys, "compile", model, "--target", "python", "-o", str(out))
    assert rc == 0, text
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "numpy_model.py"]
    proc = subprocess.run([sys.executable, "-c", "import numpy_model; print(numpy_model.rhs(0, [1, 0], u=[0]))"],
                          cwd=out, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
