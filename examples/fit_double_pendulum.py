"""Fit a double pendulum to noisy trajectories with `pdsl fit`, then score it with `pdsl evaluate`.

Two fits on the same data (BENCHMARKS A3.1 grid: dt = 0.03, 3 s; A5 chunks of 4 steps):

1. Gauss–Newton on the two masses of the Cartesian double pendulum (links, gravity and a KNOWN
   spring, which makes the absolute masses identifiable — without it only m2/(m1 + m2) is).
2. A CHNN-style model (A1.4): masses free (log space) and the potential an MLP of the
   positions, trained with AdamW through the CasADi/torch bridge (lr 1e-2, 150 epochs — far
   fewer than A5's 2000, so this model is not converged); the network is exported as a
   ``torch.nn.Sequential``. (Its masses are again defined only up to a common scale together
   with the learned V, so compare ratios, not values.)

    python examples/fit_double_pendulum.py            # out/fit_double_pendulum/
    python examples/fit_double_pendulum.py --fast     # a smaller run (what the tests use)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pdsl.cli.main import main as pdsl  # noqa: E402
from pdsl.data.csvio import read_table, write_table  # noqa: E402

PENDULUM = """\
model SpringPendulum "double pendulum, Cartesian bodies, a known spring on the lower bob"
  space 2
  param m1 = 1.0 {lower = 0}, m2 = 1.0 {lower = 0}, g = 9.81, k = 4.0
  body b1 = point(mass = m1)
  body b2 = point(mass = m2)
  link ground, b1, length = 1.0
  link b1, b2, length = 1.0
  spring ground.at([0, -2.5]), b2, k = k, rest = 0.5
  gravity g
end
"""

LEARNED = """\
model LearnedPendulum "CHNN-style: masses and an MLP potential are learned (A1.4)"
  space 2
  param m1 = 1.0 {free, lower = 0}, m2 = 1.0 {free, lower = 0}
  nn V: mlp(hidden = [32, 32], act = tanh, out = 1)
  body b1 = point(mass = m1)
  body b2 = point(mass = m2)
  link ground, b1, length = 1.0
  link b1, b2, length = 1.0
  potential V(b1.x, b1.y, b2.x, b2.y)
end
"""


def run(*args) -> None:
    rc = pdsl([str(a) for a in args])
    if rc != 0:
        raise SystemExit(rc)


def add_noise(src: Path, dst: Path, level: float, seed: int) -> None:
    table = read_table(src)
    data = table.data.copy()
    cols = [k for k, c in enumerate(table.columns) if c not in ("traj", "t")]
    rng = np.random.default_rng(seed)
    data[:, cols] += level * data[:, cols].std(axis=0) * rng.standard_normal((len(data), len(cols)))
    write_table(dst, table.columns, data)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="fewer trajectories and epochs")
    ap.add_argument("--out", default="out/fit_double_pendulum", help="output directory")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    n_traj, epochs = (8, 3) if args.fast else (20, 150)
    (out / "pendulum.phm").write_text(PENDULUM)
    (out / "learned.phm").write_text(LEARNED)

    # data: random initial states, true masses 1.3 and 0.7, 1 % noise on every column
    run("simulate", out / "pendulum.phm", "--t-end", 3, "--dt", 0.03, "--random-init", n_traj, "--random-scale", 0.5,
        "--param", "m1=1.3", "--param", "m2=0.7", "--rtol", 1e-10, "-o", out / "clean.csv")
    add_noise(out / "clean.csv", out / "noisy.csv", 0.01, seed=1)

    # 1. two physical parameters: Gauss–Newton (the default without networks)
    run("fit", out / "pendulum.phm", "--data", out / "noisy.csv", "--free", "m1,m2", "--stride", 1,
        "-o", out / "masses", "--quiet")
    masses = json.loads((out / "masses" / "params.json").read_text())["values"]
    run("evaluate", out / "pendulum.phm", "--data", out / "clean.csv", "--params", out / "masses" / "params.json",
        "--json", out / "masses" / "metrics.json")

    # 2. a learned potential: AdamW (A5 settings, fewer epochs), then the network as torch
    run("fit", out / "learned.phm", "--data", out / "noisy.csv", "--epochs", epochs, "--lr", "1e-2",
        "-o", out / "learned", "--quiet")
    learned = json.loads((out / "learned" / "params.json").read_text())
    result = {"masses": {k: masses[k] for k in ("m1", "m2")}, "learned_val_loss": learned["val_loss"]}
    try:
        import torch

        from pdsl.fit.torch_bridge import to_sequential
        from pdsl.pipeline import load_models

        nn = next(n for n in load_models(out / "learned.phm")[0].neural)
        with np.load(out / "learned" / "networks.npz") as z:
            seq = to_sequential(nn, z["V"])
        result["torch_V_at_rest"] = float(seq(torch.tensor([0.0, -1.0, 0.0, -2.0], dtype=torch.float64)).detach())
    except ImportError:
        pass
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
