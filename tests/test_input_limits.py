"""Bounds on user input (issue 26): huge integers in JSON/TOML, huge files and devices.

Every case is a located error with exit 2 — never a ValueError/OverflowError traceback (exit 1),
never a read that goes on until memory runs out."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from pdsl.cli.main import main

OSC = """\
model Oscillator
  param k = 1.0
  var x = 1.0, v
  der(x) = v
  der(v) = -k*x
end
"""
HUGE = "1" + "0" * 5000  # over Python's 4300-digit int(str) limit


def _model(tmp_path) -> str:
    path = tmp_path / "osc.phm"
    path.write_text(OSC, encoding="utf-8")
    return str(path)


def _user_error(capsys, code: str, where: str | None = None) -> str:
    err = capsys.readouterr().err
    assert f"error[{code}]" in err, err
    assert "internal error" not in err and "Traceback" not in err, err
    if where is not None:
        assert err.startswith(where), err
    return err


# ---------------------------------------------------------------- integers of more than 4300 digits
def test_huge_integer_in_params_json(tmp_path, capsys):
    params = tmp_path / "params.json"
    params.write_text('{"values": {"k": ' + HUGE + "}}", encoding="utf-8")
    code = main(["simulate", _model(tmp_path), "--t-end", "1", "--params", str(params), "-o", str(tmp_path / "o.csv")])
    assert code == 2
    err = _user_error(capsys, "BadParams", f"{params}:1:18:")
    assert "5001 digits" in err and "^" in err and "hint" in err


def test_huge_integer_in_sweep_members_toml(tmp_path, capsys):
    members = tmp_path / "m.toml"
    members.write_text("[[member]]\nk = " + HUGE + "\n", encoding="utf-8")
    code = main(["sweep", _model(tmp_path), "--members", str(members), "--t-end", "0.1", "--dt", "0.1",
                 "-o", str(tmp_path / "sw")])
    assert code == 2
    _user_error(capsys, "BadConfig", f"{members}:2:5:")


def test_huge_integer_in_fit_config_toml(tmp_path, capsys):
    config = tmp_path / "fit.toml"
    config.write_text("epochs = " + HUGE + "\n", encoding="utf-8")
    data = tmp_path / "d.csv"
    data.write_text("t,x,v\n0,1,0\n0.1,1,0\n", encoding="utf-8")
    code = main(["fit", _model(tmp_path), "--config", str(config), "--data", str(data), "-o", str(tmp_path / "fit")])
    assert code == 2
    _user_error(capsys, "BadConfig", f"{config}:1:10:")


# ---------------------------------------------------------------- file sizes
def test_dev_zero_as_a_model_is_refused_after_the_limit(capsys):
    assert main(["check", "/dev/zero"]) == 2
    err = _user_error(capsys, "FileTooLarge", "/dev/zero:1:1:")
    assert "16 MiB" in err and "not a regular file" in err


def test_dev_urandom_as_a_model_is_refused(capsys):
    assert main(["check", "/dev/urandom"]) == 2
    _user_error(capsys, "FileTooLarge", "/dev/urandom:1:1:")


def test_a_large_model_file_is_refused_without_reading_it(tmp_path, capsys):
    big = tmp_path / "big.phm"
    with open(big, "wb") as fh:
        fh.write(b"model Big\n")
        fh.truncate(20 * 2**20)  # sparse: 20 MiB
    assert main(["check", str(big)]) == 2
    err = _user_error(capsys, "FileTooLarge", f"{big}:1:1:")
    assert "is 20 MiB" in err and "model Big" in err


def test_a_model_from_a_pipe_is_still_read(tmp_path, capsys):
    r, w = os.pipe()

    def feed():
        with os.fdopen(w, "wb") as fh:
            fh.write(OSC.encode())

    t = threading.Thread(target=feed)
    t.start()
    try:
        assert main(["check", f"/dev/fd/{r}"]) == 0, capsys.readouterr().err
    finally:
        t.join()
        os.close(r)
    assert "ok  Oscillator" in capsys.readouterr().out


def test_crlf_model_keeps_its_positions(tmp_path, capsys):
    path = tmp_path / "crlf.phm"
    path.write_bytes(b"model A\r\n  var x = 1\r\n  der(x) = -y\r\nend\r\n")
    assert main(["check", str(path)]) == 2
    err = _user_error(capsys, "UnknownName", f"{path}:3:13:")
    assert "\r" not in err


def test_csv_and_params_and_toml_are_bounded(tmp_path, capsys, monkeypatch):
    import pdsl.data.csvio as csvio
    import pdsl.fit.params as fparams

    monkeypatch.setattr(csvio, "MAX_DATA_BYTES", 2**20)
    monkeypatch.setattr(fparams, "_MAX_PARAMS_BYTES", 2**20)
    model, out = _model(tmp_path), str(tmp_path / "o.csv")
    for argv, what in (
        (["simulate", model, "--t-end", "1", "--init-data", "/dev/zero", "-o", out], "1 MiB: a CSV file"),
        (["simulate", model, "--t-end", "1", "--params", "/dev/urandom", "-o", out], "1 MiB: a params.json"),
        (["sweep", model, "--members", "/dev/zero", "--t-end", "0.1", "--dt", "0.1", "-o", str(tmp_path / "sw")],
         "16 MiB: a --members file"),
        (["simulate", model, "--t-end", "1", "--random-init", "2", "--sample-file", "/dev/zero", "-o", out],
         "16 MiB: a sampling file"),
    ):
        assert main(argv) == 2, argv
        err = _user_error(capsys, "FileTooLarge")
        assert what in err, err


def test_fit_config_from_a_device_is_bounded(tmp_path, capsys):
    data = tmp_path / "d.csv"
    data.write_text("t,x,v\n0,1,0\n0.1,1,0\n", encoding="utf-8")
    assert main(["fit", _model(tmp_path), "--config", "/dev/zero", "--data", str(data), "-o", str(tmp_path / "f")]) == 2
    _user_error(capsys, "FileTooLarge", "/dev/zero:1:1:")


# ---------------------------------------------------------------- output samples
def test_absurd_time_grid_is_an_option_error(tmp_path, capsys):
    model, out = _model(tmp_path), str(tmp_path / "o.csv")
    assert main(["simulate", model, "--t-end", "1e300", "--dt", "1e-300", "-o", out]) == 2  # OverflowError before
    err = _user_error(capsys, "BadOption", "error[BadOption]: --t-end 1e+300 / --dt 1e-300")
    assert "at most 10,000,000 steps" in err and "increase --dt" in err
    assert main(["simulate", model, "--t-end", "1", "--dt", "1e-8", "-o", out]) == 2
    _user_error(capsys, "BadOption")
    assert main(["simulate", model, "--t-end", "1e-300", "--dt", "1e300", "-o", out]) == 2  # was one sample at t = 0
    assert "longer than --t-end" in _user_error(capsys, "BadOption")


def test_time_grid_bounds():
    from pdsl.diagnostics import PdslError
    from pdsl.sim.simulate import MAX_OUTPUT_STEPS, time_grid

    assert len(time_grid(1.0, 1.0 / MAX_OUTPUT_STEPS)) == MAX_OUTPUT_STEPS + 1
    for t_end, dt in ((1e300, 1e-300), (1e308, 5e-324), (1.0, 0.5 / MAX_OUTPUT_STEPS)):
        try:
            time_grid(t_end, dt)
        except PdslError as err:
            assert err.codes == ["BadOption"]
        else:
            raise AssertionError((t_end, dt))


def test_many_trajectories_are_bounded_in_rows(tmp_path, capsys):
    out = str(tmp_path / "o.csv")
    assert main(["simulate", _model(tmp_path), "--t-end", "1", "--dt", "1e-6", "--random-init", "1000", "-o", out]) == 2
    assert "at most 100,000,000 rows" in _user_error(capsys, "BadOption")


def test_toml_integers_beyond_64_bits_are_refused(tmp_path, capsys):
    """TOML's integers are 64-bit; tomllib reads 10**400, and a float() of it overflowed later (exit 1)."""
    data = tmp_path / "d.csv"
    data.write_text("t,x,v\n0,1,0\n0.1,1,0\n", encoding="utf-8")
    for key in ("epochs", "lr"):
        config = tmp_path / f"{key}.toml"
        config.write_text(f"{key} = 1" + "0" * 400 + "\n", encoding="utf-8")
        code = main(["fit", _model(tmp_path), "--config", str(config), "--data", str(data), "-o", str(tmp_path / "f")])
        assert code == 2
        err = _user_error(capsys, "BadConfig", f"{config}:1:{len(key) + 4}:")
        assert "64-bit range" in err and "401 digits" in err
    members = tmp_path / "m.toml"
    members.write_text("[[member]]\nk = -9223372036854775809\n", encoding="utf-8")
    assert main(["sweep", _model(tmp_path), "--members", str(members), "--t-end", "0.1", "--dt", "0.1",
                 "-o", str(tmp_path / "sw")]) == 2
    _user_error(capsys, "BadConfig", f"{members}:2:5:")
