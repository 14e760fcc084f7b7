"""The composition stage on its own: a parsed file in, a file of flat models out (parse -> compose -> resolve)."""

from pathlib import Path

import pytest

from pdsl.compose import compose, uses_composition
from pdsl.diagnostics import PdslError
from pdsl.parse import ast as A
from pdsl.parse.parser import parse_file, parse_text
from pdsl.parse.queries import composition_names, declared_names, names_in
from pdsl.pipeline import load_models
from pdsl.pipeline import resolve_file
from pdsl.resolve.resolver import resolve_models

ROOT = Path(__file__).resolve().parents[2]
COMPOSED = sorted((ROOT / "models" / "composition").glob("*.phm"))


def test_a_file_without_composition_passes_through_unchanged():
    f = parse_file(ROOT / "models" / "pendulum1.phm")
    assert compose(f) is f


@pytest.mark.parametrize("path", COMPOSED[:4], ids=lambda p: p.name)
def test_composed_models_come_out_flat_and_resolve_as_the_one_call_does(path):
    f = parse_file(path)
    flat = compose(f)
    assert any(uses_composition(m) for m in f.models)
    for m in flat.models:
        assert not uses_composition(m)
        assert not any(isinstance(s, A.UseStmt | A.PortStmt) for s in m.body) or not composition_names(m.body)
    staged = resolve_models(flat)
    assert [m.name for m in staged] == [m.name for m in resolve_file(f)] == [m.name for m in load_models(path)]
    # the same equations either way (the stages are pure: composing twice gives equal models)
    assert [str(m.equations) for m in staged] == [str(m.equations) for m in resolve_models(compose(f))]


def test_composition_errors_are_raised_by_the_compose_stage():
    text = "model A\n  use x = NoSuchComponent()\nend\n"
    with pytest.raises(PdslError):
        compose(parse_text(text, "bad.phm"))


def test_queries_read_the_tree_without_binding_names():
    f = parse_text("model Q\n  param k = 2\n  coord x\n  der(x) = -k*x + y\nend\n", "q.phm")
    (m,) = f.models
    assert declared_names(m.body) == {"k": "param", "x": "coord"}
    assert {"k", "x", "y", "der"} <= names_in(m.body)
    assert composition_names(m.body) == set()
