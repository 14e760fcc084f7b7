"""The console entry ends with os._exit (pdsl.cli.main.fast_exit): nothing written may be lost, exit codes stay."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODEL = str(REPO / "models" / "double_pendulum.phm")


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["PDSL_NO_CACHE"] = "1"
    return env


def test_csv_on_stdout_and_in_a_file_are_complete(tmp_path):
    """Standard output is a pipe here (block-buffered): every row must reach it before the process ends."""
    args = [sys.executable, "-m", "pdsl", "simulate", MODEL, "--t-end", "2", "--dt", "0.001"]
    piped = subprocess.run([*args, "-o", "-"], capture_output=True, text=True, timeout=600, env=_env())
    assert piped.returncode == 0, piped.stderr
    rows = piped.stdout.splitlines()
    assert len(rows) == 1 + 2001 and rows[0].startswith("t,")
    assert rows[-1].startswith("2")
    out = tmp_path / "dp.csv"
    written = subprocess.run([*args, "-o", str(out)], capture_output=True, text=True, timeout=600, env=_env())
    assert written.returncode == 0, written.stderr
    assert out.read_text(encoding="utf-8").splitlines() == rows
    assert "energy" in written.stdout  # the summary, flushed


def test_exit_codes_and_a_closed_pipe():
    bad = subprocess.run([sys.executable, "-m", "pdsl", "simulate", MODEL, "--t-end", "-1", "-o", "-"],
                         capture_output=True, text=True, timeout=600, env=_env())
    assert bad.returncode == 2 and "error[BadOption]" in bad.stderr
    # the reader stops after one line: no traceback, exit 0 (as before the fast exit)
    proc = subprocess.Popen([sys.executable, "-m", "pdsl", "simulate", MODEL, "--t-end", "50", "--dt", "0.0001", "-o", "-"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=600) == 0, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
