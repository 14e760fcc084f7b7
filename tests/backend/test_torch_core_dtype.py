"""The compiled core of the torch backend in float32 (issue 36.3): the same generated C in single precision, so that a
float32 fit runs every operation in float32 (as a hand-written float32 torch model does), with no casts around a
double core. Checked against the float64 core and against the float32 tape (torch operations only)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pdsl.backend.torch_backend import TorchSystem  # noqa: E402
from pdsl.backend.torch_core import compiler  # noqa: E402
from pdsl.pipeline import compile_model  # noqa: E402

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C compiler")

ROOT = Path(__file__).resolve().parents[2]
CHNN = ROOT / "benchmarks" / "models" / "chnn3.phm"  # the studies' 3-pendulum CHNN, here with 3 × 16 hidden units


def _chnn():
    return compile_model(CHNN, consts={"H": 16}, seed=3)


def _states(num, B, rng):
    """Random states (the rhs is a function of any state; consistency with the links does not matter here)."""
    return 0.5 * rng.standard_normal((B, num.nx))


def _float32_inputs(num, B, seed):
    """(t, x, p) as float32 tensors: B random times and states, the default parameters."""
    rng = np.random.default_rng(seed)
    x = torch.tensor(_states(num, B, rng), dtype=torch.float32)
    t = torch.tensor(rng.standard_normal(B), dtype=torch.float32)
    return t, x, torch.tensor(num.p_default, dtype=torch.float32)


def test_float32_core_is_float32_and_agrees_with_float64(monkeypatch):
    monkeypatch.setenv("PDSL_TORCH_CORE", "c")
    c = _chnn()
    rng = np.random.default_rng(0)
    B = 20
    x = _states(c.numeric, B, rng)
    t = rng.standard_normal(B)
    p = c.numeric.p_default
    w = rng.standard_normal((B, c.numeric.nx))
    out = {}
    for dt in (torch.float64, torch.float32):
        ts = TorchSystem(c.system, dtype=dt)
        assert ts.core == "c"
        P = torch.tensor(p, dtype=dt, requires_grad=True)
        X = torch.tensor(x, dtype=dt, requires_grad=True)
        xdot = ts.rhs(torch.tensor(t, dtype=dt), X, ts.bind(P))
        assert xdot.dtype == dt
        gp, gx = torch.autograd.grad((xdot * torch.tensor(w, dtype=dt)).sum(), [P, X])
        assert gp.dtype == dt and gx.dtype == dt
        out[dt] = [v.detach().double().numpy() for v in (xdot, gp, gx)]
        if dt == torch.float32:
            assert ts._core._built[torch.float32] is True  # the float library ran, not the mixed fallback
    for a, b in zip(out[torch.float32], out[torch.float64]):
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-5 * np.abs(b).max())
    assert not np.allclose(out[torch.float32][0], out[torch.float64][0], rtol=0, atol=1e-12)  # single precision ran


def test_float32_core_equals_the_float32_tape(monkeypatch):
    """The same operations in float32 two ways (generated C, torch operations): equal to float32 round-off."""
    c = _chnn()
    t, x, p = _float32_inputs(c.numeric, 16, seed=1)
    res = {}
    for core in ("c", "tape"):
        monkeypatch.setenv("PDSL_TORCH_CORE", core)
        ts = TorchSystem(c.system, dtype=torch.float32)
        assert ts.core == core
        res[core] = ts.rhs(t, x, ts.bind(p)).double().numpy()
    np.testing.assert_allclose(res["c"], res["tape"], rtol=0, atol=5e-5 * np.abs(res["tape"]).max())


def test_a_failed_float_build_falls_back_to_the_mixed_path(monkeypatch):
    """No float library (its build fails): float32 networks around the double core, still float32 out, same values."""
    import pdsl.backend.torch_core as tc

    monkeypatch.setenv("PDSL_TORCH_CORE", "c")
    c = _chnn()
    t, x, p = _float32_inputs(c.numeric, 8, seed=2)
    good = TorchSystem(c.system, dtype=torch.float32)
    ref = good.rhs(t, x, good.bind(p))
    real = tc._compile

    def failing(funs, tag, dtype=torch.float64):
        if dtype != torch.float64:
            raise OSError("no float build here")
        return real(funs, tag, dtype)

    monkeypatch.setattr(tc, "_compile", failing)
    ts = TorchSystem(c.system, dtype=torch.float32)
    assert ts.core == "c" and ts._core._built[torch.float32] is False
    out = ts.rhs(t, x, ts.bind(p))
    assert out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=0, atol=5e-5 * float(ref.abs().max()))
