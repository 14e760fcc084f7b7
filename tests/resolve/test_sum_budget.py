"""A model's sums expand to at most MAX_SUM_TERMS terms in all, checked before expanding (issue 26)."""

from __future__ import annotations

import time

from pdsl.cli.main import main
from pdsl.resolve.expressions import MAX_SUM_TERMS

NESTED = """\
model Nest
  const N = 3000
  param a[1..N] = 1.0
  var x = 0.0
  der(x) = -x + sum(sum(a[i]*a[j]*x for j in 1..N) for i in 1..N)
end
"""
NESTED_SMALL_ARRAYS = """\
model Nest2
  const N = 3000
  var x = 0.0
  der(x) = -x + sum(sum(sum(x/(i + j + k) for k in 1..2) for j in 1..i) for i in 1..N)
end
"""
LOOPED = """\
model Loop
  const N = 400
  var x[1..N] = 0.0
  der(x[i]) = sum(x[j] - x[i] for j in 1..N)/N for i in 1..N
end
"""


def _check(tmp_path, text, *extra):
    path = tmp_path / "m.phm"
    path.write_text(text, encoding="utf-8")
    start = time.process_time()
    code = main(["check", str(path), *extra])
    return path, code, time.process_time() - start


def _too_many(capsys, path, line, col):
    err = capsys.readouterr().err
    assert err.startswith(f"{path}:{line}:{col}: error[TooManyTerms]:"), err
    assert f"{MAX_SUM_TERMS:,} terms" in err and "hint" in err and "^" in err
    assert "internal error" not in err
    return err


def test_nested_sum_is_refused_before_expansion(tmp_path, capsys):
    path, code, cpu = _check(tmp_path, NESTED)  # 9 million terms: no answer in 60 s before
    assert code == 2
    assert "3,000 terms, with the sums inside it" in _too_many(capsys, path, 5, 17)
    assert cpu < 20  # refused from an estimate, not after expanding 100,000 terms


def test_nested_sum_of_small_arrays_is_refused_before_expansion(tmp_path, capsys):
    path, code, cpu = _check(tmp_path, NESTED_SMALL_ARRAYS)
    assert code == 2
    _too_many(capsys, path, 4, 17)
    assert cpu < 20


def test_nested_sum_within_the_budget_is_fine(tmp_path, capsys):
    path, code, _ = _check(tmp_path, NESTED, "--const", "N=300")  # 90,300 terms
    assert code == 0, capsys.readouterr().err


def test_the_budget_is_per_model_across_loops(tmp_path, capsys):
    path, code, _ = _check(tmp_path, LOOPED)  # 400 sums of 400 terms
    assert code == 2
    assert "(400 terms)" in _too_many(capsys, path, 4, 15)
    path, code, _ = _check(tmp_path, LOOPED, "--const", "N=300")
    assert code == 0, capsys.readouterr().err
