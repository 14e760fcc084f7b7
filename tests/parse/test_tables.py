"""The parser's tables ship in the package as JSON data (pdsl/parse/tables.py): current, equivalent to a parser
built from the grammar, and never read from or written to any cache directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from lark.exceptions import UnexpectedInput

from pdsl.parse import parser as P
from pdsl.parse import tables

ROOT = Path(__file__).resolve().parents[2]
MODELS = sorted(p for p in (ROOT / "models").rglob("*.phm")) + sorted((ROOT / "tests").rglob("*.phm"))
BAD = ["model M\n  coord x = \nend\n", "model M\n  param a = 1 +* 2\nend\n", "model M\n  coord x = 1\n",
       "model M\n  lagrangian der(x)^2 (\nend\n", "model 3\nend\n", "model M\n  when x < 0 then\nend\n"]


@pytest.fixture(scope="module")
def parsers():
    grammar = P.grammar_path().read_text(encoding="utf-8")
    return tables.load(grammar, P.LineJoiner()), tables.build(grammar, P.LineJoiner())


def test_generated_tables_are_current():
    """The generated module was made from this grammar and this lark (else `python -m pdsl.parse.tables`)."""
    assert tables.main(["--check"]) == 0


def test_loaded_tables_are_used_not_rebuilt(monkeypatch):
    import lark

    from pdsl.parse import _lalr_tables

    if lark.__version__ != _lalr_tables.LARK:
        pytest.skip(f"tables made with lark {_lalr_tables.LARK}, this is {lark.__version__}: built in memory instead")
    grammar = P.grammar_path().read_text(encoding="utf-8")
    monkeypatch.setattr(tables, "build", lambda *a: pytest.fail("the tables were rebuilt from the grammar"))
    assert tables.load(grammar, P.LineJoiner()) is not None


def test_stale_tables_fall_back_to_the_grammar():
    grammar = P.grammar_path().read_text(encoding="utf-8") + "\n// an edit\n"
    parser = tables.load(grammar, P.LineJoiner())
    assert parser.parse("model M\n  coord x = 1\nend\n", start="start").data == "start"


@pytest.mark.parametrize("path", MODELS, ids=lambda p: str(p.relative_to(ROOT)))
def test_same_trees_as_a_parser_built_from_the_grammar(parsers, path):
    loaded, built = parsers
    text = path.read_text(encoding="utf-8").removeprefix("\ufeff")
    try:
        expected = built.parse(text, start="start")
    except UnexpectedInput as err:
        with pytest.raises(type(err)):
            loaded.parse(text, start="start")
        return
    assert loaded.parse(text, start="start") == expected


@pytest.mark.parametrize("text", BAD)
def test_same_syntax_errors(parsers, text):
    loaded, built = parsers
    errors = []
    for parser in parsers:
        with pytest.raises(UnexpectedInput) as info:
            parser.parse(text, start="start")
        err = info.value
        errors.append((type(err), err.line, err.column, sorted(getattr(err, "expected", None) or ())))
    assert errors[0] == errors[1]


def test_parsing_touches_no_cache_directory(tmp_path):
    """`check` (the parser's only user on that path) reads and writes nothing where a cache could be."""
    cache = tmp_path / "cache"
    env = {**os.environ, "PDSL_CACHE_DIR": str(cache), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    run = subprocess.run([sys.executable, "-m", "pdsl", "check", str(ROOT / "models" / "double_pendulum.phm")],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert not cache.exists() or not any(cache.iterdir())
    assert not (tmp_path / "xdg").exists() or not any((tmp_path / "xdg").rglob("*"))


def test_no_pickle_in_the_parser():
    for f in (ROOT / "pdsl" / "parse").glob("*.py"):
        assert "pickle" not in f.read_text(encoding="utf-8").replace("no pickle", ""), f
