"""`pdsl fit --no-plots`: no figures, no matplotlib (and on the CasADi path no torch) — issue 18's cheap fit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pdsl.cli.main import main

MODELS = Path(__file__).resolve().parents[2] / "models"


def test_no_plots_writes_no_figures_and_removes_stale_ones(tmp_path, capsys):
    data = tmp_path / "co.csv"
    assert main(["simulate", str(MODELS / "coupled_oscillator.phm"), "--t-end", "2", "--dt", "0.05", "-o", str(data)]) == 0
    out = tmp_path / "fit"
    assert main(["fit", str(MODELS / "coupled_oscillator.phm"), "--data", str(data), "-o", str(out), "--free", "alpha",
                 "--quiet"]) == 0
    assert (out / "loss.png").exists() and (out / "validation.png").exists()
    assert main(["fit", str(MODELS / "coupled_oscillator.phm"), "--data", str(data), "-o", str(out), "--free", "alpha",
                 "--quiet", "--no-plots"]) == 0
    assert not (out / "loss.png").exists() and not (out / "validation.png").exists()
    assert "Plots were not drawn" in (out / "report.md").read_text(encoding="utf-8")
    assert (out / "params.json").exists() and (out / "history.csv").exists()


def test_a_gauss_newton_fit_without_plots_imports_neither_matplotlib_nor_torch(tmp_path):
    data = tmp_path / "co.csv"
    assert main(["simulate", str(MODELS / "coupled_oscillator.phm"), "--t-end", "2", "--dt", "0.05", "-o", str(data)]) == 0
    code = ("import sys\nfrom pdsl.cli.main import main\n"
            f"assert main(['fit', {str(MODELS / 'coupled_oscillator.phm')!r}, '--data', {str(data)!r}, '-o', "
            f"{str(tmp_path / 'fit')!r}, '--free', 'alpha', '--quiet', '--no-plots']) == 0\n"
            "print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "PDSL_NO_CACHE": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
