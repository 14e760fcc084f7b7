"""Flattening walks expressions without recursion: a long sum inside a `use`d component (issue 26)."""

from __future__ import annotations

from pdsl.cli.main import main


def _write(tmp_path, n: int):
    terms = " + ".join(f"{k}*x" for k in range(1, n + 1))
    (tmp_path / "lib.phm").write_text(
        f"model Comp\n  param k = 1.0\n  var x = 1.0\n  der(x) = -k*x + 0*({terms})\nend\n", encoding="utf-8")
    uses = " + ".join(["c.x"] * n)
    given = " + ".join(["a"] * n)
    top = tmp_path / "top.phm"
    top.write_text(f'import "lib.phm"\nmodel Top\n  param a = 1.0\n  use c = Comp(k = {given})\n'
                   f"  var y = 0.0\n  der(y) = {uses}\nend\n", encoding="utf-8")
    return top


def test_long_sum_in_a_used_component_flattens(tmp_path, capsys):
    top = _write(tmp_path, 3000)  # RecursionError (exit 1) from 330 terms before
    assert main(["check", str(top)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "ok  Top" in out


def test_long_sum_in_a_used_component_simulates(tmp_path, capsys):
    top = _write(tmp_path, 500)
    out = tmp_path / "out.csv"
    assert main(["simulate", str(top), "--t-end", "0.01", "-o", str(out)]) == 0, capsys.readouterr().err
    assert out.read_text().startswith("t,")
