"""MLP graphs of ``pdsl.backend.neural``: the backpropagated input Jacobian and the unchanged outputs."""

from __future__ import annotations

import casadi as ca
import numpy as np
import pytest

import pdsl
from pdsl.diagnostics import Span
from pdsl.resolve.model import Neural
from pdsl.backend.neural import _ACT, init_weights, layer_sizes, mlp_forward_backward, n_weights

SHAPES = [((5, 7), 3, 2), ((6,), 2, 1), ((4, 4, 4), 1, 3), ((9, 8), 2, 1)]


def _net(act: str, hidden, n_in: int, n_out: int, acts=()):
    return Neural(name="V", arch="mlp", n_in=n_in, hidden=tuple(hidden), n_out=n_out, act=act, fn=None,
                  span=Span("t.phm", 1, 1, 1, 2), acts=tuple(acts))


def _reference_forward(nn, x, w):
    """The forward pass as pdsl wrote it before the backpropagated Jacobian (layer by layer, same layout)."""
    sizes = layer_sizes(nn)
    h, k = x, 0
    for li, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        W = ca.reshape(w[k : k + fan_in * fan_out], fan_out, fan_in)
        k += fan_in * fan_out
        b = w[k : k + fan_out]
        k += fan_out
        h = _ACT[nn.layer_acts()[li]](ca.mtimes(W, h) + b)
    return h


def _numpy_forward(nn, x, w):
    """The same network in numpy (tanh only), from the documented layout: W column-major, then b."""
    sizes = layer_sizes(nn)
    h, k = np.asarray(x, dtype=float), 0
    for li, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        W = w[k : k + fan_in * fan_out].reshape(fan_in, fan_out).T
        k += fan_in * fan_out
        h = W @ h + w[k : k + fan_out]
        k += fan_out
        if li < len(sizes) - 2:
            h = np.tanh(h)
    return h


@pytest.mark.parametrize("act", sorted(_ACT))
@pytest.mark.parametrize(("hidden", "n_in", "n_out"), SHAPES)
@pytest.mark.parametrize("sym", [ca.MX.sym, ca.SX.sym], ids=["MX", "SX"])
def test_backpropagated_jacobian_equals_casadi_jacobian_and_outputs_are_unchanged(act, hidden, n_in, n_out, sym):
    nn = _net(act, hidden, n_in, n_out)
    x, w = sym("x", n_in), sym("w", n_weights(nn))
    y, J = mlp_forward_backward(nn, x, w)
    assert J.shape == (n_out, n_in)
    y_ref = _reference_forward(nn, x, w)
    F = ca.Function("F", [x, w], [y, J, y_ref, ca.jacobian(y_ref, x)])
    rng = np.random.default_rng(4)
    weights = 2.0 * init_weights(nn, 3)  # larger than the default init: saturated and negative pre-activations too
    for _ in range(25):
        y_v, J_v, y_r, J_r = (np.array(v) for v in F(rng.normal(0.0, 1.5, n_in), weights))
        np.testing.assert_array_equal(y_v, y_r)
        np.testing.assert_allclose(J_v, J_r, rtol=0.0, atol=1e-12 * max(1.0, np.abs(J_r).max()))


@pytest.mark.parametrize("acts", [("sin", "sin", "sin", "elu"), ("sin", "tanh", "identity"), ("relu", "softplus")])
def test_per_layer_activations_and_a_nonlinear_output_layer(acts):
    """`act = [sin, sin, sin, elu]` (BENCHMARKS D4.2's network): one activation per layer, the last for the output."""
    nn = _net("tanh", (7, 6, 5)[: len(acts) - 1], 4, 3, acts)
    x, w = ca.MX.sym("x", 4), ca.MX.sym("w", n_weights(nn))
    y, J = mlp_forward_backward(nn, x, w)
    F = ca.Function("F", [x, w], [y, J, _reference_forward(nn, x, w), ca.jacobian(y, x)])
    rng = np.random.default_rng(7)
    weights = 2.0 * init_weights(nn, 1)
    for _ in range(10):
        y_v, J_v, y_r, J_r = (np.array(v) for v in F(rng.normal(0.0, 1.5, 4), weights))
        np.testing.assert_allclose(y_v, y_r, rtol=0, atol=1e-14)
        np.testing.assert_allclose(J_v, J_r, rtol=0, atol=1e-12 * max(1.0, np.abs(J_r).max()))
    if acts[-1] == "elu":
        assert np.all(np.array(F(rng.normal(0, 1.5, 4), weights)[0]) > -1)  # ELU output: bounded below by −1


def _compile(hidden=(8, 6), act="tanh"):
    text = f"""model NN "unit-mass particle in a learned 2-D potential"
  coord q1 = 0.5, q2 = -0.3
  momentum p1 = 0.1, p2 = 0.2
  nn V: mlp(hidden = [{", ".join(map(str, hidden))}], act = {act})
  hamiltonian (p1^2 + p2^2)/2 + V(q1, q2)
end
"""
    return pdsl.compile_model("nn.phm", text=text).numeric


@pytest.mark.parametrize("act", ["tanh", "softplus", "gelu"])
def test_compiled_model_rhs_is_minus_the_potential_gradient(act):
    """num.rhs (backpropagated dV/dq, inlined) = the CasADi Jacobian of num.energy (forward pass only)."""
    num = _compile(act=act)
    n = len(num.p_names)
    t, x, p = ca.MX.sym("t"), ca.MX.sym("x", 4), ca.MX.sym("p", n)
    none = ca.MX(0, 1)
    check = ca.Function("check", [t, x, p], [num.rhs(t, x, p, none), ca.jacobian(num.energy(t, x, p, none), x)])
    rng = np.random.default_rng(8)
    for _ in range(10):
        xdot, dH = (np.array(v).ravel() for v in check(0.0, rng.normal(size=4), num.p_default + 0.1 * rng.normal(size=n)))
        np.testing.assert_allclose(xdot, np.concatenate([dH[2:], -dH[:2]]), rtol=0.0, atol=1e-12)


def test_compiled_model_energy_is_the_documented_network():
    num = _compile()
    nn = _net("tanh", (8, 6), 2, 1)
    x = np.array([0.3, -0.7, 0.2, 0.5])
    E = float(num.energy(0.0, x, num.p_default, []))
    expected = 0.5 * (x[2] ** 2 + x[3] ** 2) + float(_numpy_forward(nn, x[:2], num.p_default)[0])
    assert E == pytest.approx(expected, rel=1e-14, abs=1e-14)


def test_network_graph_is_inlined_once_per_input_list():
    """Output and gradient share one forward pass; the rhs holds no nested Function call."""
    num = _compile()
    assert num.rhs.is_a("MXFunction")
    calls = [k for k in range(num.rhs.n_instructions()) if num.rhs.instruction_MX(k).is_call()]
    assert calls == []


# ---------------------------------------------------------------- mlp(init = …)
def _layers(nn, w):
    """[(W, b)] from pdsl's flat layout, as numpy arrays."""
    out, k = [], 0
    sizes = layer_sizes(nn)
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        W = w[k : k + fan_in * fan_out].reshape(fan_in, fan_out).T
        k += fan_in * fan_out
        out.append((W, w[k : k + fan_out]))
        k += fan_out
    assert k == len(w)
    return out


def test_orthogonal_init_has_orthonormal_rows_or_columns_and_torch_default_biases():
    nn = Neural(name="V", arch="mlp", n_in=6, hidden=(32, 32, 8), n_out=1, act="tanh", fn=None,
                span=Span("t.phm", 1, 1, 1, 2), init="orthogonal")
    w = init_weights(nn, 4)
    assert len(w) == n_weights(nn)
    for W, b in _layers(nn, w):
        fan_out, fan_in = W.shape
        G = W @ W.T if fan_out <= fan_in else W.T @ W  # orthonormal rows (wide) or columns (tall): gain 1
        np.testing.assert_allclose(G, np.eye(min(W.shape)), atol=1e-12)
        assert np.all(np.abs(b) <= 1 / np.sqrt(fan_in)) and np.all(b != 0)
    np.testing.assert_array_equal(w, init_weights(nn, 4))  # seeded
    assert not np.array_equal(w, init_weights(nn, 5))


def test_orthogonal_init_matches_torch_orthogonal_in_distribution():
    """Singular values all 1 and the entries' spread 1/√max(fan) — the statistics of torch.nn.init.orthogonal_
    (not its random stream); the default (uniform) draw is unchanged: W, b ~ U(−1/√fan_in, 1/√fan_in)."""
    nn = Neural(name="V", arch="mlp", n_in=4, hidden=(256,), n_out=1, act="tanh", fn=None,
                span=Span("t.phm", 1, 1, 1, 2), init="orthogonal")
    (W1, _), (W2, _) = _layers(nn, init_weights(nn, 0))
    np.testing.assert_allclose(np.linalg.svd(W1, compute_uv=False), 1.0, atol=1e-12)
    assert abs(W1.std() * np.sqrt(256) - 1) < 0.1 and abs(np.linalg.norm(W2) - 1) < 1e-12
    uni = Neural(name="V", arch="mlp", n_in=4, hidden=(256,), n_out=1, act="tanh", fn=None,
                 span=Span("t.phm", 1, 1, 1, 2))
    (U1, b1), (U2, _) = _layers(uni, init_weights(uni, 0))
    assert np.all(np.abs(U1) <= 0.5) and abs(U1.std() - 0.5 / np.sqrt(3)) < 0.02  # U(−1/2, 1/2) for fan_in 4
    assert np.all(np.abs(U2) <= 1 / 16)


def test_model_init_option_reaches_the_compiled_weights():
    src = ("model M\n  coord q = 0.1\n  momentum p = 0\n  nn V: mlp(hidden = [16, 16], act = tanh, init = orthogonal)\n"
           "  hamiltonian p^2/2 + V(q)\nend\n")
    compiled = pdsl.compile_model("m.phm", text=src)
    nn = compiled.system.neural[0]
    assert nn.init == "orthogonal"
    w = np.asarray(compiled.numeric.p_default)[len(compiled.system.params):]
    W2 = _layers(nn, w)[1][0]
    np.testing.assert_allclose(W2 @ W2.T, np.eye(16), atol=1e-12)
    from pdsl.show import render_system

    assert "V: mlp 1 -> 16 -> 16 -> 1, act tanh, init orthogonal" in render_system(compiled.system, simplify=False)


@pytest.mark.parametrize("opt, code, needle", [
    ("init = glorot", "BadArgument", "unknown weight initialisation"),
    ("init = orthogonal, init = uniform", "DuplicateDefinition", "given twice"),
])
def test_bad_init_option_is_a_located_error(opt, code, needle):
    src = f"model M\n  coord q = 0.1\n  momentum p = 0\n  nn V: mlp(hidden = [4], {opt})\n  hamiltonian p^2/2 + V(q)\nend\n"
    with pytest.raises(pdsl.PdslError) as e:
        pdsl.compile_model("m.phm", text=src)
    d = e.value.diagnostics[0]
    assert d.code == code and needle in d.message and d.span.line == 4
    assert len(e.value.diagnostics) == 1  # the network is still declared: its call adds no "unknown function"


def test_bad_dropout_is_reported_once():
    src = "model M\n  coord q = 0.1\n  momentum p = 0\n  nn V: mlp(hidden = [4], dropout = 1.5)\n  hamiltonian p^2/2 + V(q)\nend\n"
    with pytest.raises(pdsl.PdslError) as e:
        pdsl.compile_model("m.phm", text=src)
    assert [d.code for d in e.value.diagnostics] == ["BadArgument"]
    assert "dropout rate must be in [0, 1)" in e.value.diagnostics[0].message
