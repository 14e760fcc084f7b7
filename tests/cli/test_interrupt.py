"""Ctrl-C ends a command with one line `interrupted` and exit 130, never an internal or a user error (issue 26).

CasADi turns a KeyboardInterrupt raised in a CVODES right-hand side into a RuntimeError ("rhs failed:
KeyboardInterrupt", CV_RHSFUNC_FAIL), which pdsl reported as an IntegratorFailure (exit 2) or an internal
error (exit 1)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pdsl.cli import main as cli
from pdsl.diagnostics import PdslError

REPO = Path(__file__).resolve().parents[2]
MODEL = str(REPO / "models" / "double_pendulum.phm")


def _raise_sigint_as(kind):
    def command(args):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler raises KeyboardInterrupt at once
        except KeyboardInterrupt:
            if kind == "runtime":
                raise RuntimeError("rhs failed: KeyboardInterrupt; CVode returned \"CV_RHSFUNC_FAIL\"") from None
            raise PdslError.at("IntegratorFailure", "cvodes failed: the right-hand side failed") from None
        raise AssertionError("no KeyboardInterrupt")
    return command


@pytest.mark.parametrize("kind", ["runtime", "pdsl"])
def test_an_interrupt_a_library_converts_is_still_an_interrupt(monkeypatch, capsys, kind):
    # a run started in the background (nohup, `cmd &` in a script) inherits SIGINT ignored: give the test the
    # handler an interactive Python has, and put back whatever the runner had
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _check_interrupt(monkeypatch, capsys, kind)
    finally:
        signal.signal(signal.SIGINT, previous)


def _check_interrupt(monkeypatch, capsys, kind):
    monkeypatch.setitem(cli.COMMANDS, "check", _raise_sigint_as(kind))
    assert cli.main(["check", MODEL]) == 130
    err = capsys.readouterr().err
    assert err == "interrupted\n", err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back for the caller


def test_errors_without_an_interrupt_are_unchanged(monkeypatch, capsys):
    def broken(args):
        raise RuntimeError("a bug")

    monkeypatch.setitem(cli.COMMANDS, "check", broken)
    assert cli.main(["check", MODEL]) == 1
    assert capsys.readouterr().err.startswith("internal error: RuntimeError: a bug")


def _casadi_loaded(pid: int) -> bool:
    try:
        return "casadi" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="waits for CasADi to be loaded via /proc/PID/maps")
@pytest.mark.parametrize("delay", [0.0, 0.7, 2.0, 4.0])
def test_ctrl_c_during_simulate(tmp_path, delay):
    """SIGINT at several moments after the command has started work (CasADi loaded: past start-up, whatever the
    load): exit 130 and the one line `interrupted`, or a normal finish — never an error or a traceback."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), PDSL_NO_CACHE="1")
    proc = subprocess.Popen([sys.executable, "-m", "pdsl", "simulate", MODEL, "--t-end", "30000", "--dt", "0.01",
                             "--rtol", "1e-10", "--compile", "no", "-o", str(tmp_path / "dp.csv")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while not _casadi_loaded(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode in (0, 130), (proc.returncode, err)
    assert "Traceback" not in err and "internal error" not in err and "error[" not in err, err
    if proc.returncode == 130:
        assert err.strip().splitlines()[-1] == "interrupted", err
