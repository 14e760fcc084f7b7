"""pdsl's AdamW (pdsl/fit/train.py ``_AdamW``): torch's update through its functional form, the state kept by pdsl.

It must equal ``torch.optim.AdamW`` bit for bit (two tensors, one without weight decay, a changing lr, a tensor
without a gradient in some steps), save its state under torch's ``state_dict`` keys (a checkpoint resumes across
the two), and not import ``torch._dynamo`` (the reason it exists: 0.8 s of every fit process).
"""

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pdsl.fit.train import TrainOptions, _optimizer  # noqa: E402


def _grads(k: int, shapes):
    g = torch.Generator().manual_seed(100 + k)
    return [torch.randn(*s, generator=g, dtype=torch.float64) for s in shapes]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_equals_torch_adamw_bit_for_bit(dtype):
    shapes = [(3,), (40,)]
    init = [torch.linspace(-1, 1, s[0], dtype=dtype) for s in shapes]
    ours = [t.clone().requires_grad_(True) for t in init]
    theirs = [t.clone().requires_grad_(True) for t in init]
    opts = TrainOptions(lr=3e-3, weight_decay=1e-4)
    mine = _optimizer(ours, [0.0, None], opts)
    ref = torch.optim.AdamW([{"params": [theirs[0]], "weight_decay": 0.0}, {"params": [theirs[1]], "weight_decay": 1e-4}],
                            lr=3e-3)
    for k in range(12):
        lr = 3e-3 * (1 + np.cos(np.pi * k / 12)) / 2
        mine.lr = lr
        for group in ref.param_groups:
            group["lr"] = lr
        grads = _grads(k, shapes)
        for ts in (ours, theirs):
            for i, (t, g) in enumerate(zip(ts, grads)):
                t.grad = None if (i == 0 and k % 4 == 3) else g.to(dtype)  # the first tensor skips some steps
        mine.step()
        ref.step()
        for a, b in zip(ours, theirs):
            assert torch.equal(a, b), k
    # the state under torch's keys, equal to torch's own
    saved = mine.arrays()
    theirs_sd = ref.state_dict()["state"]
    assert sorted(saved) == sorted(f"{i}.{k}" for i, st in theirs_sd.items() for k in st)
    for key, v in saved.items():
        i, _, k = key.partition(".")
        np.testing.assert_array_equal(v, theirs_sd[int(i)][k].numpy())


def test_state_round_trip_resumes_identically():
    """Saved after 5 steps and loaded into a fresh optimiser, the next 5 steps equal an uninterrupted run."""
    opts = TrainOptions(lr=1e-2, weight_decay=1e-3)
    a = [torch.ones(7, dtype=torch.float64, requires_grad=True)]
    b = [torch.ones(7, dtype=torch.float64, requires_grad=True)]
    oa, ob = _optimizer(a, [None], opts), _optimizer(b, [None], opts)
    for k in range(5):
        for t in a + b:
            t.grad = _grads(k, [(7,)])[0]
        oa.step()
        ob.step()
    ob2 = _optimizer(b, [None], opts)
    ob2.load({**ob.arrays(), "best_theta": np.zeros(7)})  # other arrays in the checkpoint are ignored
    for k in range(5, 10):
        for t in a + b:
            t.grad = _grads(k, [(7,)])[0]
        oa.step()
        ob2.step()
    assert torch.equal(a[0], b[0])
    assert float(ob2.state[0]["step"]) == 10.0


def test_does_not_import_dynamo():
    code = ("import sys, torch\n"
            "from pdsl.fit.train import TrainOptions, _optimizer\n"
            "t = torch.zeros(3, requires_grad=True)\n"
            "o = _optimizer([t], [None], TrainOptions())\n"
            "t.grad = torch.ones(3)\n"
            "o.step()\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
