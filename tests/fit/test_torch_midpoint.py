"""Implicit midpoint / Gauss–Legendre fits on the torch backend, float32 and devices, the training
protocol options (issue 15). Small models; a few seconds."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fit_helpers import cli  # noqa: E402

from pdsl.diagnostics import PdslError  # noqa: E402
from pdsl.fit.config import FitConfig  # noqa: E402
from pdsl.fit.data import Chunks  # noqa: E402
from pdsl.fit.loss import ChunkLoss, LossSpec  # noqa: E402
from pdsl.fit.params import make_layout  # noqa: E402
from pdsl.fit.backends import choose_backend  # noqa: E402
from pdsl.fit.torch_loss import TorchChunkLoss  # noqa: E402
from pdsl.pipeline import compile_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

HNN1 = """\
model HNN1 "1-DOF HNN (BENCHMARKS B1: MLP 2-16-32-16-1)"
  coord q
  momentum p
  nn H: mlp(hidden = [16, 32, 16], act = tanh)
  hamiltonian H(q, p)
end
"""

DRIVEN = """\
model Driven
  param k = 2.0 {free, lower = 0}, c = 0.3 {free, lower = 0, upper = 1}
  nn f: mlp(hidden = [5], act = softplus, out = 2)
  input F
  var x, v
  der(x) = v + 0.2*f(x, v, F)[2]
  der(v) = -k*x - c*v + F + f(x, v, F)[1]
end
"""


def _setup(text, spec, seed=3):
    c = compile_model("m.phm", text=text, seed=seed)
    num = c.numeric
    lay = make_layout(num, c.model, [])
    observed = tuple(num.report_names)
    rng = np.random.default_rng(2)
    B, n = 6, spec.steps
    x0 = rng.uniform(-1, 1, (B, num.nx))
    T = spec.dt * np.arange(n + 1)[None].repeat(B, 0) + rng.uniform(0, 1, (B, 1))
    chunks = Chunks(x0, rng.uniform(-1, 1, (B, len(observed), n)), rng.standard_normal((B, len(num.u_names), n + 1)),
                    T, np.zeros((B, 2), dtype=int))
    theta = lay.theta_from_p(num.p_default) + 0.05 * rng.standard_normal(lay.n_theta)
    return num, lay, observed, chunks, theta


@pytest.mark.parametrize("text", [HNN1, DRIVEN], ids=["hnn", "driven"])
@pytest.mark.parametrize("method", ["midpoint", "gauss2"])
def test_torch_implicit_equals_casadi(text, method):
    """CasADi (Newton rootfinder, IFT gradient) and torch (defaults: FPI 6 + discrete adjoint; and
    Newton) give the same loss and gradient; CasADi FPI-6 equals torch FPI-6 unrolled."""
    spec = LossSpec(steps=3, dt=0.05, method=method, loss="mse", substeps=2)
    num, lay, observed, chunks, theta = _setup(text, spec)
    L_ref, g_ref = ChunkLoss(num, lay, spec, observed).value_grad(theta, chunks)
    for opts in ({}, {"solver": "newton"}):
        L, g = TorchChunkLoss(num, lay, replace(spec, step_options=opts), observed).value_grad(theta, chunks)
        assert L == pytest.approx(L_ref, rel=1e-10)
        np.testing.assert_allclose(g, g_ref, rtol=1e-7, atol=1e-9 * np.abs(g_ref).max())
    fpi = replace(spec, step_options={"solver": "fpi", "n_iter": 2, "gradient": "unrolled"})
    L_ref, g_ref = ChunkLoss(num, lay, fpi, observed).value_grad(theta, chunks)
    L, g = TorchChunkLoss(num, lay, fpi, observed).value_grad(theta, chunks)
    assert L == pytest.approx(L_ref, rel=1e-12)
    np.testing.assert_allclose(g, g_ref, rtol=1e-9, atol=1e-11 * np.abs(g_ref).max())


@pytest.mark.parametrize("core", ["c", "tape"])
def test_float32_matches_float64(core, monkeypatch):
    """float32 on the tape, and mixed (float32 networks, the compiled float64 glue): float32 accuracy."""
    if core == "c":
        from pdsl.backend.torch_core import compiler

        if compiler() is None:
            pytest.skip("no C compiler")
    monkeypatch.setenv("PDSL_TORCH_CORE", core)
    spec = LossSpec(steps=4, dt=0.05, method="midpoint", loss="mse")
    num, lay, observed, chunks, theta = _setup(HNN1, spec)
    L64, g64 = TorchChunkLoss(num, lay, spec, observed).value_grad(theta, chunks)
    l32 = TorchChunkLoss(num, lay, replace(spec, dtype="float32"), observed)
    assert l32.system.core == core
    L32, g32 = l32.value_grad(theta, chunks)
    assert L32 == pytest.approx(L64, rel=1e-5)
    np.testing.assert_allclose(g32, g64, rtol=0, atol=2e-5 * np.abs(g64).max())
    assert not np.allclose(g32, g64, rtol=0, atol=1e-12 * np.abs(g64).max())  # it did run in float32


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu():
    spec = LossSpec(steps=4, dt=0.05, method="midpoint", loss="mse")
    num, lay, observed, chunks, theta = _setup(HNN1, spec)
    L, g = TorchChunkLoss(num, lay, spec, observed).value_grad(theta, chunks)
    Lc, gc = TorchChunkLoss(num, lay, replace(spec, device="cuda"), observed).value_grad(theta, chunks)
    assert Lc == pytest.approx(L, rel=1e-10)
    np.testing.assert_allclose(gc, g, rtol=1e-8, atol=1e-12)


def test_midpoint_picks_torch_and_dtype_needs_it():
    spec = LossSpec(steps=3, dt=0.05, method="midpoint")
    num, lay, *_ = _setup(HNN1, spec)
    cfg = FitConfig(data="x", method="adamw", integrator="midpoint")
    assert choose_backend(cfg, num, lay, spec) == "torch"
    with pytest.raises(PdslError, match="CasADi backend runs in float64"):
        choose_backend(replace(cfg, backend="casadi"), num, lay, replace(spec, dtype="float32"))


@pytest.fixture(scope="module")
def hnn_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("hnn")
    truth = d / "dw.phm"
    truth.write_text((ROOT / "models" / "double_well.phm").read_text())
    model = d / "hnn.phm"
    model.write_text(HNN1)
    data = d / "dw.csv"
    assert cli("simulate", truth, "--t-end", 0.6, "--dt", 0.05, "--random-init", 8, "--sample", "q = uniform(-1.5, 1.5)",
               "--sample", "p = uniform(-1, 1)", "--seed", 1, "--noise", 0.01, "-o", data) == 0
    return model, data, truth


def test_cli_midpoint_protocol(tmp_path, hnn_files, capsys):
    model, data, _ = hnn_files
    out = tmp_path / "fit"
    rc = cli("fit", model, "--data", data, "-o", out, "--quiet", "--integrator", "midpoint", "--epochs", "6",
             "--batch", "4", "--lr", "0.01", "--loss", "mse", "--chunk", "3", "--window", "random",
             "--schedule", "plateau", "--patience", "1", "--early-stop", "2", "--val-fraction", "0.25")
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "midpoint x1" in text and "torch backend" in text
    assert " s per epoch)" in text  # the summary line scripts read
    params = json.loads((out / "params.json").read_text())
    assert params["settings"]["window"] == "random" and params["settings"]["schedule"] == "plateau"


def test_cli_warmup_scales_the_first_epochs(tmp_path, hnn_files, capsys):
    """--warmup W: epoch k runs at the schedule's lr times (k + 1)/W while k < W (the history's lr column), the
    banner says so, and the fit records it (a resumed run continues the same schedule)."""
    import math

    model, data, _ = hnn_files
    out = tmp_path / "fit"
    rc = cli("fit", model, "--data", data, "-o", out, "--quiet", "--epochs", "6", "--batch", "4", "--lr", "0.01",
             "--chunk", "3", "--val-fraction", "0", "--warmup", "4", "--stop-after", "2")
    assert rc == 0 and "6 epochs (lr warm-up over 4)" in capsys.readouterr().out
    rc = cli("fit", model, "--data", data, "-o", out, "--quiet", "--epochs", "6", "--batch", "4", "--lr", "0.01",
             "--chunk", "3", "--val-fraction", "0", "--warmup", "4", "--resume")
    assert rc == 0, capsys.readouterr().out
    lr = np.genfromtxt(out / "history.csv", delimiter=",", names=True)["lr_or_damping"]
    cosine = [0.01 * (1 + math.cos(math.pi * k / 6)) / 2 for k in range(6)]
    expected = [c * min(1.0, (k + 1) / 4) for k, c in enumerate(cosine)]
    np.testing.assert_allclose(lr, expected, rtol=1e-12)
    assert json.loads((out / "params.json").read_text())["settings"]["warmup"] == 4


@pytest.mark.parametrize("extra,msg", [
    (["--integrator", "midpoint", "--fpi-iters", "0"], "fpi-iters must be a positive integer"),
    (["--integrator", "midpoint", "--implicit-solver", "newton", "--gradient", "unrolled"], "not Newton"),
    (["--implicit-solver", "fpi"], "apply to the implicit integrators"),
    (["--dtype", "float32", "--backend", "casadi", "--method", "adamw"], "CasADi backend runs in float64"),
    (["--device", "tpu"], "--device tpu: unknown"),
    (["--device", "cuda:7"], "no such CUDA device"),
    (["--method", "gauss-newton", "--schedule", "plateau"], "adamw settings"),
    (["--dropout", "1.5"], "--dropout must be in [0, 1)"),
    (["--method", "gauss-newton", "--warmup", "3"], "adamw settings"),
    (["--warmup", "-1"], "--warmup must be a non-negative integer"),
    (["--dropout", "0.2", "--backend", "casadi", "--method", "adamw"], "without dropout"),
])
def test_cli_bad_options_exit_2(tmp_path, hnn_files, capsys, extra, msg):
    model, data, _ = hnn_files
    rc = cli("fit", model, "--data", data, "-o", tmp_path / "o", "--quiet", "--epochs", "1", *extra)
    err = capsys.readouterr().err
    assert rc == 2 and msg in err and "Traceback" not in err


def test_dropout_masks_are_consistent_through_the_adjoint():
    """One mask per sample and layer for the whole rollout: the discrete adjoint (which re-evaluates the
    network in its backward pass) equals backprop through converged sweeps under the same masks; the
    masked network's input Jacobian equals autograd's; evaluation (no key) uses no dropout."""
    from pdsl.backend.torch_backend import mlp_torch

    spec = LossSpec(steps=3, dt=0.05, method="midpoint", loss="mse", dropout=0.3)
    num, lay, observed, chunks, theta = _setup(HNN1, spec)
    th = torch.tensor(theta)
    adj = TorchChunkLoss(num, lay, replace(spec, step_options={"n_iter": 40, "tol": 1e-15}), observed)
    unr = TorchChunkLoss(num, lay, replace(spec, step_options={"n_iter": 40, "tol": 1e-15, "gradient": "unrolled"}), observed)
    grads = []
    for loss in (adj, unr):
        t = th.clone().requires_grad_(True)
        L = loss.objective(t, chunks, dropout_key=(0, 1, 2))
        grads.append((float(L.detach()), torch.autograd.grad(L, t)[0].numpy()))
    assert grads[0][0] == pytest.approx(grads[1][0], rel=1e-13)
    np.testing.assert_allclose(grads[0][1], grads[1][1], rtol=1e-9, atol=1e-12 * np.abs(grads[1][1]).max())
    plain = float(adj.objective(th, chunks))
    other = float(adj.objective(th, chunks, dropout_key=(0, 1, 3)))
    assert plain != grads[0][0] and other != grads[0][0]
    assert float(adj.objective(th, chunks, dropout_key=(0, 1, 2))) == grads[0][0]  # seeded
    # the masked MLP's input Jacobian
    nn = adj.system.nets[0]
    bound = adj.system.bind(adj.p_of_theta(th))
    masks = adj.system.dropout_masks(0.3, 5, torch.Generator().manual_seed(1))[nn.name]
    X = torch.randn(5, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(2)).requires_grad_(True)
    y, J = mlp_torch(nn, bound.layers[nn.name], X, True, masks=masks)
    (g,) = torch.autograd.grad(y.sum(), X)
    torch.testing.assert_close(J[:, 0, :], g, rtol=1e-12, atol=1e-14)


def test_toml_settings(tmp_path):
    from pdsl.fit.config import check_options, load_toml, step_options

    good = tmp_path / "fit.toml"
    good.write_text('data = "d.csv"\nintegrator = "midpoint"\nimplicit_solver = "fpi"\nfpi_iters = 3\nfpi_tol = 1e-12\n'
                    'gradient = "unrolled"\ndtype = "float32"\nwindow = "random"\nschedule = "plateau"\ndropout = 0.1\n')
    cfg = FitConfig(**load_toml(good))
    check_options(cfg)
    assert step_options(cfg) == {"solver": "fpi", "n_iter": 3, "tol": 1e-12, "gradient": "unrolled"}
    bad = tmp_path / "bad.toml"
    bad.write_text('data = "d.csv"\nintegrator = "midpoint"\nfpi_iters = "six"\n')
    with pytest.raises(PdslError, match="fpi_iters` must be an integer") as e:
        load_toml(bad)
    assert e.value.diagnostics[0].span.line == 3  # located at its line
    worse = tmp_path / "worse.toml"
    worse.write_text('data = "d.csv"\ngradient = "backprop"\n')
    with pytest.raises(PdslError, match="--gradient backprop: unknown"):
        check_options(FitConfig(**load_toml(worse)))


def test_mlp_dropout_in_the_model(tmp_path, hnn_files, capsys):
    """`mlp(dropout = r)` in the model is the default of `--dropout r` (AdamW, torch): the same seeded fit
    with either gives identical parameters, and they differ from a fit without dropout; `--dropout 0`
    overrides the model's rate; only the named network gets masks."""
    model, data, _ = hnn_files
    dropped = tmp_path / "hnn_dropout.phm"
    dropped.write_text(HNN1.replace("act = tanh)", "act = tanh, dropout = 0.2)"))
    c = compile_model(str(dropped))
    assert [nn.dropout for nn in c.model.neural] == [0.2]
    common = ("--data", data, "--quiet", "--epochs", "2", "--batch", "4", "--lr", "0.01", "--chunk", "3", "--backend", "torch")
    runs = {}
    for tag, path, extra in [("model", dropped, ()), ("flag", model, ("--dropout", "0.2")), ("none", model, ()),
                             ("override", dropped, ("--dropout", "0"))]:
        assert cli("fit", path, "-o", tmp_path / tag, *common, *extra) == 0, capsys.readouterr()
        p = json.loads((tmp_path / tag / "params.json").read_text())
        runs[tag] = (p["train_loss"], p["val_loss"])
    assert runs["model"] == runs["flag"]
    assert runs["none"] == runs["override"] != runs["model"]
    num = c.numeric
    lay = make_layout(num, c.model, [])
    loss = TorchChunkLoss(num, lay, LossSpec(steps=2, dt=0.05, method="rk4", dropout=(("H", 0.2),)), tuple(num.report_names))
    masks = loss.system.dropout_masks((("H", 0.2),), 3, torch.Generator().manual_seed(0))
    assert set(masks) == {"H"} and [m.shape for m in masks["H"]] == [(3, 16), (3, 32), (3, 16)]
    assert loss.system.dropout_masks((("other", 0.2),), 3, torch.Generator().manual_seed(0)) == {}


@pytest.mark.parametrize("arg,msg", [("dropout = 1.5", "dropout rate must be in [0, 1)"),
                                     ("dropout = -0.1", "dropout rate must be in [0, 1)"),
                                     ("dropout = q", "error[NotConstant]")])
def test_mlp_dropout_bad_values(tmp_path, arg, msg, capsys):
    bad = tmp_path / "bad.phm"
    bad.write_text(HNN1.replace("act = tanh)", f"act = tanh, {arg})"))
    assert cli("check", bad) == 2
    err = capsys.readouterr().err
    assert msg in err and "bad.phm:4:" in err and "Traceback" not in err
