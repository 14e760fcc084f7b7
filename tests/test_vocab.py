"""pdsl.vocab: the one table of integrators and the shared words agree with the stages that interpret them, and the
records' facts (order, implicit, tableau) are measured, not copied."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from pdsl import vocab
from pdsl.numerics import fixed_step


def test_vocab_imports_no_numeric_backend():
    code = ("import sys, pdsl.vocab, pdsl.cli.choices; "
            "heavy = [m for m in sys.modules if m.split('.')[0] in ('casadi', 'numpy', 'sympy', 'torch', 'lark')]; "
            "print(heavy); sys.exit(1 if heavy else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_fixed_step_record_has_its_tableau_and_the_same_implicitness():
    for m in vocab.INTEGRATORS:
        if m.engine != vocab.Engine.FIXED_STEP:
            continue
        assert m.tableau == m.name and m.tableau in fixed_step.METHODS
        tab = fixed_step.tableau(m.tableau)
        assert tab.implicit == m.implicit, m.name
        assert (m.family == vocab.Family.IMPLICIT_RK) == tab.implicit
    assert set(fixed_step.METHODS) == set(vocab.integrators(engine=vocab.Engine.FIXED_STEP))


def _rk_error(name: str, n: int) -> float:
    """|x(1) - e^{-1} ...| of x' = -x + sin(t), x(0) = 1 with n steps (closed form below)."""
    def f(t, x):
        return -x + np.sin(t)

    h, x = 1.0 / n, np.array([1.0])
    tab = fixed_step.tableau(name)
    for k in range(n):
        t = k * h
        if not tab.implicit:
            x = fixed_step.explicit_rk_step(f, name, t, x, h)
        else:  # the stage equations, linear here: solve them exactly (an independent route from make_step's)
            s = tab.stages
            A = np.array(tab.a)
            c = np.array(tab.c)
            # K_i = -(x + h sum_j a_ij K_j) + sin(t + c_i h)  ->  (I + h A) K = -x + sin(t + c h)
            K = np.linalg.solve(np.eye(s) + h * A, -x[0] + np.sin(t + c * h))
            x = x + h * float(np.dot(tab.b, K))
    exact = 1.5 * np.exp(-1.0) + 0.5 * (np.sin(1.0) - np.cos(1.0))
    return abs(float(x[0]) - exact)


@pytest.mark.parametrize("name", vocab.integrators(engine=vocab.Engine.FIXED_STEP))
def test_the_recorded_order_is_the_measured_order(name):
    m = vocab.integrator(name)
    e1, e2 = _rk_error(name, 16), _rk_error(name, 32)
    measured = np.log2(e1 / e2)
    assert abs(measured - m.order) < 0.25, (name, measured)


def test_explicit_rk_step_is_the_classical_rk4():
    """Against the textbook formula, written out (an independent route)."""
    def f(t, x):
        return np.array([x[1], -np.sin(x[0]) + 0.1 * t])

    t, x, h = 0.3, np.array([0.7, -0.2]), 0.05
    k1 = f(t, x)
    k2 = f(t + h / 2, x + h / 2 * k1)
    k3 = f(t + h / 2, x + h / 2 * k2)
    k4 = f(t + h, x + h * k3)
    ref = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    assert np.allclose(fixed_step.explicit_rk_step(f, "rk4", t, x, h), ref, rtol=0, atol=1e-15)
    with pytest.raises(ValueError):
        fixed_step.explicit_rk_step(f, "gauss2", t, x, h)


def test_adaptive_and_multistep_records():
    import casadi as ca

    from pdsl.numerics import dop853

    d = vocab.integrator("dop853")
    assert d.tableau == "dop853" and d.order == 8 and not d.implicit and dop853.N_STAGES == 12
    for name in vocab.SUNDIALS:
        m = vocab.integrator(name)
        assert m.family == vocab.Family.MULTISTEP and ca.has_integrator(m.plugin)
    assert vocab.integrators(dae=True) == ("idas",)


def test_the_stages_read_the_table():
    from pdsl.cli import choices
    from pdsl.fit import loss
    from pdsl.fit.backends import BACKENDS, TORCH_INTEGRATORS
    from pdsl.lower.registry import FORMULATIONS, STABILIZATIONS
    from pdsl.numerics.sensitivity import LOSSES
    from pdsl.sim.simulate import AUTO, FIXED_STEP, INTEGRATORS, NATIVE, STABILIZERS

    assert choices.INTEGRATORS == (AUTO, *INTEGRATORS, *NATIVE, *FIXED_STEP) == ("auto", *vocab.SIMULATE_INTEGRATORS)
    assert choices.STABILIZERS == STABILIZERS == vocab.STABILIZE_SIMULATE
    assert STABILIZATIONS == vocab.STABILIZE_LOWER and set(STABILIZATIONS) < set(STABILIZERS)
    assert FORMULATIONS == choices.FORMULATIONS == vocab.FORMULATIONS
    assert loss.INTEGRATORS == vocab.FIT_INTEGRATORS and loss.LOSSES == vocab.TRAJECTORY_LOSSES
    assert TORCH_INTEGRATORS == vocab.TORCH_INTEGRATORS and BACKENDS == vocab.FIT_BACKENDS
    assert LOSSES == vocab.SENSITIVITY_LOSSES
    assert all(type(v) is str for v in (*choices.INTEGRATORS, *choices.STABILIZERS, *vocab.FIT_LOSSES))


def test_the_torch_integrators_step_in_torch():
    torch = pytest.importorskip("torch")
    from pdsl.numerics.torch_steps import rk_step

    def f(t, x, bound):
        return -x

    x = torch.ones(2, 1, dtype=torch.float64)
    for name in vocab.TORCH_INTEGRATORS:
        y = rk_step(f, name, 0.1, 0.0, x, bound=None,
                    p=torch.zeros(1, dtype=torch.float64), bind=lambda p: None)
        # one step's local error is O(h^(order+1))
        assert torch.allclose(y, torch.full_like(x, np.exp(-0.1)), rtol=0, atol=0.1 ** (vocab.integrator(name).order + 1)), name


def test_every_backend_implements_exactly_the_activations_of_the_vocabulary():
    """One list of activations (pdsl.vocab.ACTIVATIONS): the resolver accepts it, each backend's value and
    derivative tables cover exactly it."""
    import re
    from pathlib import Path

    import pdsl.backend.neural as casadi_nn
    from pdsl.resolve.common import _ACTIVATIONS
    from pdsl.vocab import ACTIVATIONS

    want = set(ACTIVATIONS)
    assert set(_ACTIVATIONS) == want
    assert set(casadi_nn._ACT) == want and set(casadi_nn._DACT) == want
    # the generated numpy code's table (pdsl.compile.targets writes it as text): its keys
    text = (Path(__file__).resolve().parents[1] / "pdsl" / "compile" / "targets.py").read_text(encoding="utf-8")
    table = text[text.index("_ACT = {{"):]
    table = table[:table.index("}}")]
    assert set(re.findall(r'^\s*"(\w+)": \(', table, re.M)) == want
    torch = pytest.importorskip("torch")
    del torch
    import pdsl.backend.torch_backend as torch_nn
    import pdsl.fit.torch_bridge as bridge

    assert set(torch_nn._ACT) == want and set(torch_nn._DACT) == want
    assert set(bridge._ACT) == want
