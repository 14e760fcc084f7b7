"""Internal errors found by the mutation fuzzer (benchmarks/fuzz_campaign.py --stage simulate, seed 20261130), now
located user errors."""

from __future__ import annotations

from pdsl.cli.main import main

GEAR_1E308 = """model Gear
  space 2
  body w1 = rigid(dim = 2, mass = 1.0, moments = [0.5, 0.5])
  body w2 = rigid(dim = 2, mass = 1.0, moments = [0.25, 0.25])
  joint p1: ground, w1
  joint p2: ground.at([1e308, 0]), w2
  port a1: rotational = p1.rate
  port a2: rotational = -1e308*p2.rate
  connect a1, a2
  force 1.0 on a1
end
"""

RATE_IN_ENERGY = """model RLC
  param q = 1.0, L = 0.5, C = 0.1
  input V
  flow_store cap(R) energy R^2/(2*C)
  effort_store ind(phi) energy phi^2/(der(R)*L)
  resistive res: e = q*f
  effort_source src = V
  junction common_flow(cap, ind, res, -src)
end
"""


def _run(tmp_path, capsys, text):
    path = tmp_path / "m.phm"
    path.write_text(text, encoding="utf-8")
    code = main(["simulate", str(path), "--t-end", "1", "-o", str(tmp_path / "o.csv"), "--no-cache"])
    return code, capsys.readouterr().err


def test_constraints_that_are_not_finite_at_the_start_are_a_located_error(tmp_path, capsys):
    code, err = _run(tmp_path, capsys, GEAR_1E308)
    assert code == 2 and "error[InconsistentInitialState]" in err and "internal error" not in err


def test_a_stored_energy_that_reads_a_rate_is_a_located_error(tmp_path, capsys):
    code, err = _run(tmp_path, capsys, RATE_IN_ENERGY)
    assert code == 2 and "error[BadElement]" in err and "der(R)" in err and ":5:" in err
