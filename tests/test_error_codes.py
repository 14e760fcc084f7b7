"""Every error code the source can raise is documented in docs/error codes table."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CODE = re.compile(r"[A-Z][a-z]+(?:[A-Z][a-z0-9]*)+|Syntax")
RAISERS = {"at", "error", "Diagnostic", "Unusable"}  # PdslError.at, Collector.error, Diagnostic(...)


def codes_in_source() -> dict[str, str]:
    found = {}
    for path in sorted((REPO / "pdsl").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
                continue
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            value = node.args[0].value
            if name in RAISERS and isinstance(value, str) and CODE.fullmatch(value):
                found.setdefault(value, f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_every_error_code_has_a_row_in_docs():
    rows = [line for line in (REPO / "docs" / "errors.md").read_text(encoding="utf-8").splitlines() if line.startswith("| `")]
    documented = set()
    for row in rows:
        documented.update(re.findall(r"`([A-Za-z]+)`", row.split("|")[1]))
    found = codes_in_source()
    assert len(found) > 50  # the scan itself works
    missing = {c: where for c, where in found.items() if c not in documented}
    assert not missing, f"undocumented error codes (add a row to docs/errors.md): {missing}"


def test_internal_errors_are_not_user_errors():
    """A broken invariant is `internal error` with exit 1 (InternalError), never an `Internal*` code with exit 2."""
    internal = {c: where for c, where in codes_in_source().items() if c.startswith("Internal")}
    assert not internal, f"raise pdsl.diagnostics.InternalError for bugs, not a user-error code: {internal}"


def test_internal_error_exits_1_without_a_code(monkeypatch, capsys):
    from pdsl.cli import main as cli
    from pdsl.diagnostics import InternalError, PdslError

    assert not issubclass(InternalError, PdslError)

    def broken(args):
        raise InternalError("no CasADi translation for sympy node `Foo`")

    monkeypatch.setitem(cli.COMMANDS, "check", broken)
    assert cli.main(["check", str(REPO / "models" / "pendulum1.phm")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("internal error: InternalError: no CasADi translation") and "error[" not in err


def test_one_code_per_problem():
    """Codes that once named the same problem twice stay merged."""
    found = codes_in_source()
    assert "UnknownJunctionKind" in found and "UnknownJunction" not in found
