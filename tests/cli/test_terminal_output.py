"""What the CLI writes besides its results (issue 34): progress bars only on a terminal (no carriage-return frames
in a log file), silenced by the global -q as by fit --quiet; no colour under NO_COLOR; simulate --plot without -o."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from pdsl.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
PENDULUM = ROOT / "models" / "step_pendulum.phm"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("bars") / "run.csv"
    assert main(["simulate", str(PENDULUM), "--t-end", "2", "--dt", "0.05", "-o", str(d)]) == 0
    return d


def _fit(data: Path, out: Path, *flags: str, tty: bool, before=()) -> tuple[str, str]:
    """``pdsl [before] fit ... [flags]`` in a subprocess; standard error a pseudo-terminal or a file."""
    argv = [sys.executable, "-m", "pdsl", *before, "fit", str(PENDULUM), "--data", str(data), "--free", "c",
            "--param", "c=0.1", "-o", str(out), "--no-plots", *flags]
    env = {**os.environ, "COLUMNS": "100"}
    if not tty:
        log = out.with_suffix(".log")
        with open(log, "w") as err:
            proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=ROOT, timeout=300)
        assert proc.returncode == 0
        return proc.stdout, log.read_text()
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a new pty is 0 columns wide
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave, env=env, cwd=ROOT)
    os.close(slave)
    chunks = []
    while True:  # drain the terminal while the fit runs (a full pty buffer would block it)
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        elif proc.poll() is not None:
            break
    out_text = proc.stdout.read().decode()
    assert proc.wait(timeout=300) == 0
    os.close(master)
    return out_text, b"".join(chunks).decode(errors="replace")


def test_no_bar_frames_in_a_log_file(data, tmp_path):
    out, err = _fit(data, tmp_path / "fit", tty=False)
    assert "\r" not in err and "epoch" not in err
    assert "c = 0.05" in out  # the summary is all there is


def test_the_bar_is_drawn_on_a_terminal(data, tmp_path):
    out, err = _fit(data, tmp_path / "fit", tty=True)
    assert "\r" in err and "gauss-newton" in err and "epoch" in err
    assert "c = 0.05" in out


@pytest.mark.parametrize("flags, before, summary", [
    (("--quiet",), (), True),  # fit's own --quiet: no bar, the summary stays
    ((), ("-q",), False),  # the global -q: no bar and no summary
    (("-q",), (), False),  # -q after the command is the global one
])
def test_quiet_flags_silence_the_bar(data, tmp_path, flags, before, summary):
    out, err = _fit(data, tmp_path / "fit", *flags, tty=True, before=before)
    assert "\r" not in err and "epoch" not in err
    assert ("c = 0.05" in out) is summary
    assert (tmp_path / "fit" / "params.json").is_file()


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("value, colored", [(None, True), ("1", False), ("", True)])
def test_no_color(tmp_path, monkeypatch, value, colored):
    """Diagnostics are coloured on a terminal, unless NO_COLOR is set to a non-empty value (no-color.org)."""
    bad = tmp_path / "bad.phm"
    bad.write_text("model Bad\n  var x = 1\n  der(x) = -k*x\nend\n")
    if value is None:
        monkeypatch.delenv("NO_COLOR", raising=False)
    else:
        monkeypatch.setenv("NO_COLOR", value)
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    assert main(["check", str(bad)]) == 2
    text = term.getvalue()
    assert "error[" in text and ("\x1b[" in text) is colored


def test_terminal_helpers(monkeypatch):
    from pdsl import terminal

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert terminal.color(_Terminal()) and not terminal.color(io.StringIO())
    assert terminal.progress(_Terminal()) and not terminal.progress(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "yes")
    assert not terminal.color(_Terminal()) and terminal.progress(_Terminal())  # NO_COLOR is about colour only


def test_simulate_plot_without_output(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "run.png"
    assert main(["simulate", str(PENDULUM), "--t-end", "1", "--dt", "0.1", "--plot", str(png)]) == 0
    assert png.stat().st_size > 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.png"]  # no table, no sidecar
    out = capsys.readouterr().out
    assert "StepPendulum: 11 samples" in out and "plot -> " in out and "None" not in out


@pytest.mark.parametrize("extra, fragment", [
    ((), "simulate writes nothing"),
    (("--plot", "x.png", "--random-init", "3"), "--random-init needs -o"),
    (("--plot", "x.png", "--columns", "theta"), "--columns needs -o"),
])
def test_simulate_without_output_errors(tmp_path, capsys, extra, fragment):
    assert main(["simulate", str(PENDULUM), "--t-end", "1", *extra]) == 2
    err = capsys.readouterr().err
    assert "error[BadOption]" in err and fragment in err
