"""`pdsl show` finishes in bounded time: sp.simplify runs under a per-call deadline and a total budget.

`pdsl show models/magnet_pendulum.phm --formulation lagrangian` ran for more than 5 minutes
(measured: one sp.simplify call on the ≈250-operation dipole force ran > 10 s, sp.gcd in the
common-factor cancellation for minutes), the gyroscope's `show` 212–286 s. With the budget
(2 s per call, 10 s per render) they take ≈13 s and ≈18 s (most of the latter printing its large
elimination rows); small models print exactly as before.
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


def test_deadline_interrupts_a_slow_call():
    budget = show._Budget(total=5.0, each=0.3)

    def slow():
        t = time.monotonic()
        while time.monotonic() - t < 30:  # pure Python: interruptible
            sum(range(1000))
        return "finished"

    start = time.monotonic()
    assert budget.call(slow, lambda: "fallback") == "fallback"
    assert time.monotonic() - start < 3.0 and budget.timeouts == 1
    assert budget.call(lambda: "quick", lambda: "fallback") == "quick"
    budget.left = 0.0  # spent: no more attempts
    assert budget.call(lambda: "quick", lambda: "fallback") == "fallback"


def test_magnet_pendulum_lagrangian_show_is_bounded(monkeypatch, capsys):
    monkeypatch.setattr(show, "_SIMPLIFY_SECONDS_TOTAL", 3.0)
    monkeypatch.setattr(show, "_SIMPLIFY_SECONDS_EACH", 1.0)
    start = time.monotonic()
    assert main(["show", str(MODELS / "magnet_pendulum.phm"), "--formulation", "lagrangian"]) == 0
    assert time.monotonic() - start < 25.0
    out = capsys.readouterr().out
    assert "Newton for bob.x" in out and "Holonomic constraints" in out


def test_small_expressions_are_still_simplified():
    e = sp.sin(sp.Symbol("x")) ** 2 + sp.cos(sp.Symbol("x")) ** 2
    show._BUDGET = show._Budget()
    assert show._tidy(e) == 1


def test_without_a_deadline_slow_kinds_are_not_simplified():
    """Outside the main thread no timer can be set: radicals of big sums and Abs are shown as derived."""
    model = load_models(str(MODELS / "magnet_pendulum.phm"))[0]
    system = lower(model, "lagrangian")
    rows = [eq.rhs for eq in system.differential if "Newton for bob.x" in eq.label]
    assert show._slow_kind(rows[0])
    result = {}

    def work():
        budget = show._Budget(total=60.0, each=60.0)
        t = time.monotonic()
        result["value"] = budget.simplify(rows[0])
        result["seconds"] = time.monotonic() - t

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive() and result["value"] == rows[0] and result["seconds"] < 1.0
