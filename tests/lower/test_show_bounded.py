"""`pdsl show` finishes in bounded time: sp.simplify runs under a per-call and a per-render budget counted in
operations (function calls), never in seconds, so that a render is the same on a calm and on a busy machine.

`pdsl show models/magnet_pendulum.phm --formulation lagrangian` ran for more than 5 minutes
(measured: one sp.simplify call on the ≈250-operation dipole force ran > 10 s, sp.gcd in the
common-factor cancellation for minutes), the gyroscope's `show` 212–286 s. With the budget they finish in
seconds; small models print exactly as before.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import sympy as sp

import pdsl.show as show
from pdsl.cli.main import main
from pdsl.lower import lower
from pdsl.pipeline import load_models

MODELS = Path(__file__).resolve().parents[2] / "models"


def test_budget_stops_a_slow_call_by_operations():
    budget = show._Budget(total=50_000, each=20_000)
    calls = []

    def slow():
        while True:  # would never end: only the operation count stops it
            calls.append(sum(range(10)))

    assert budget.call(slow, lambda: "fallback") == "fallback"
    assert budget.timeouts == 1 and budget.left == 50_000 - 20_001
    assert budget.call(lambda: "quick", lambda: "fallback") == "quick"
    budget.left = 0  # spent: no more attempts
    assert budget.call(lambda: "quick", lambda: "fallback") == "fallback"
    import sys

    assert sys.getprofile() is None  # the counter is gone


def test_budget_is_the_same_under_load():
    """The same call is stopped at the same place whatever the machine does meanwhile (no clock involved)."""
    spins = []

    def slow():
        while True:
            spins.append(len(spins))

    stops = []
    for _ in range(2):
        spins.clear()
        budget = show._Budget(total=10_000, each=10_000)
        stop = threading.Event()
        burner = threading.Thread(target=lambda: [sum(range(1000)) for _ in iter(stop.is_set, True)])
        burner.start()  # competes for the interpreter: a deadline would see fewer iterations
        try:
            budget.call(slow, lambda: None)
        finally:
            stop.set()
            burner.join()
        stops.append(len(spins))
    assert stops[0] == stops[1] > 0


def test_magnet_pendulum_lagrangian_show_is_bounded(monkeypatch, capsys):
    monkeypatch.setattr(show, "_SIMPLIFY_OPS_TOTAL", 3_000_000)
    monkeypatch.setattr(show, "_SIMPLIFY_OPS_EACH", 1_000_000)
    assert main(["show", str(MODELS / "magnet_pendulum.phm"), "--formulation", "lagrangian"]) == 0
    out = capsys.readouterr().out
    assert "Newton for bob.x" in out and "Holonomic constraints" in out


def test_small_expressions_are_still_simplified():
    e = sp.sin(sp.Symbol("x")) ** 2 + sp.cos(sp.Symbol("x")) ** 2
    show._BUDGET = show._Budget()
    assert show._tidy(e) == 1


def test_slow_kinds_are_not_simplified_in_any_thread():
    """Radicals of big sums and Abs (single long C calls inside simplify) are shown as derived, in any thread."""
    model = load_models(str(MODELS / "magnet_pendulum.phm"))[0]
    system = lower(model, "lagrangian")
    rows = [eq.rhs for eq in system.differential if "Newton for bob.x" in eq.label]
    assert show._slow_kind(rows[0])
    result = {}

    def work():
        budget = show._Budget()
        t = time.monotonic()
        result["value"] = budget.simplify(rows[0])
        result["seconds"] = time.monotonic() - t

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive() and result["value"] == rows[0]


def test_show_is_the_same_in_two_processes_one_of_them_loaded(tmp_path):
    """Two renders of a model that spends simplify's budget print the same text, with two CPU burners beside one."""
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "pdsl", "show", str(MODELS / "rigid_rotor.phm"), "--format", "latex"]
    env = {**os.environ, "PDSL_NO_CACHE": "1"}
    calm = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        busy = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    finally:
        for b in burners:
            b.kill()
            b.wait()
    assert calm.returncode == busy.returncode == 0, calm.stderr + busy.stderr
    assert calm.stdout == busy.stdout


def test_a_model_that_spends_the_budget_renders_the_same_way_twice():
    """rigid_rotor spends all of the render's operations; a second render (Jupyter displaying it again) and a
    render after other sympy work give the same text."""
    model = load_models(str(MODELS / "rigid_rotor.phm"))[0]
    system = lower(model)
    first = show.render_system(system, "latex")
    assert show._BUDGET.timeouts >= 1 and show._BUDGET.left <= 0  # the budget was the limit
    assert show.render_system(system, "latex") == first
    show._RENDERED.clear()
    sp.simplify(sp.sin(sp.Symbol("q")) ** 2 + sp.cos(sp.Symbol("q")) ** 2)  # other work in the process
    assert show.render_system(lower(load_models(str(MODELS / "rigid_rotor.phm"))[0]), "latex") == first
