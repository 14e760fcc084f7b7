"""Malformed and ill-typed models: each gives one located diagnostic, never a crash.

Every row names the exact error code and the line and column of the first
diagnostic, and a fragment that the message or hint must contain (so a message
that stops saying what is wrong fails here). Models go through the whole front
end and the lowering (``load_models`` then ``lower``), because a few errors
(formalism mix-ups, unbalanced systems) can only be seen there.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pdsl.diagnostics import PdslError, render
from pdsl.lower import lower
from pdsl.pipeline import compile_model, load_models


def _model(body: str, name: str = "A") -> str:
    """``model A`` around an indented body (the body's first line is line 2)."""
    return f"model {name}\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "  ") + "\nend\n"


PLAIN = "var x\nder(x) = {}"  # line 3 is the equation; its right side starts at column 12


def _plain(rhs: str) -> str:
    return _model(PLAIN.format(rhs))


# (name, model text, code, line, col, fragment of message or hint)
ERRORS = [
    # ---- syntax
    ("missing_end", "model A\n  var x\n  der(x) = -x\n", "UnexpectedEnd", 3, 14, "model `A` (line 1)"),
    ("missing_end_before_next_model", "model A\n  var x\n  der(x) = -x\nmodel B\n  var y\n  der(y) = -y\nend\n", "MissingEnd", 4, 1, "model `A` (line 1) is not closed"),
    ("unclosed_paren", _plain("(-x"), "UnbalancedBracket", 3, 12, "never closed"),
    ("stray_closing_bracket", _plain("-x]"), "UnbalancedBracket", 3, 14, "closes nothing"),
    ("mismatched_brackets", _plain("sin(x]"), "UnbalancedBracket", 3, 17, "does not match the `(`"),
    ("unclosed_vector_at_eof", "model A\n  var x\n  der(x) = [x, x\n", "UnbalancedBracket", 3, 12, "never closed"),
    ("stray_operator", _plain("* x"), "Syntax", 3, 12, "unexpected `*`"),
    ("python_power_operator", _plain("x ** 2"), "Syntax", 3, 14, "a^b"),
    ("python_comparison", _model("var x\nder(x) == -x"), "Syntax", 3, 10, "single `=`"),
    ("dangling_operator", _plain("x +"), "Syntax", 3, 15, "expected an expression"),
    ("bad_number_two_points", _plain("1.2.3 * x"), "BadNumber", 3, 12, "`1.2.3` is not a number"),
    ("bad_number_exponent", _plain("1e * x"), "BadNumber", 3, 12, "`1e` is not a number"),
    ("number_glued_to_name", _plain("2x"), "BadNumber", 3, 12, "2*x"),
    ("number_too_large", _plain("1e999 * x"), "BadNumber", 3, 12, "floating-point"),
    ("power_too_large", _plain("10^10^10 * x"), "BadNumber", 3, 12, "10^1e+10"),
    ("misspelled_keyword", _model("parm k = 1\nvar x\nder(x) = -k*x"), "UnknownStatement", 2, 3, "did you mean `param`"),
    ("model_without_name", "model\nend\n", "Syntax", 1, 6, "expected a name"),
    ("range_missing_bracket", _model("param m[1..3 = 1\nvar x\nder(x) = -x"), "Syntax", 2, 16, "expected `]`"),
    ("end_without_model", _model("var x\nder(x) = -x") + "end\n", "Syntax", 5, 1, "unexpected `end`"),
    ("bad_character", _plain("x @ 2"), "BadCharacter", 3, 14, "not a program"),
    ("greek_letter_name", _model("var θ\nder(θ) = 1"), "BadCharacter", 2, 7, "write `theta`"),
    # ---- Python payloads: located diagnostics, nothing is ever run
    ("python_import_payload", _plain("__import__('os').system('x')"), "BadCharacter", 3, 23, "strings"),
    ("python_exec_string", _plain('exec("x")'), "Syntax", 3, 17, "strings are only allowed"),
    ("python_statement_separator", _model("var x\nx = 1; import os"), "BadCharacter", 3, 8, "not a program"),
    ("python_exec_call", _plain("exec(x)"), "UnknownFunction", 3, 12, "unknown function `exec`"),
    ("python_dunder_attribute", _plain("x.__class__"), "UnknownName", 3, 12, "no attribute `__class__`"),
    ("python_lambda", _model("var x\nder(x) = (lambda y: y)(x)"), "Syntax", 3, 20, "unexpected `y`"),
    # ---- unknown and duplicate names
    ("unknown_name_did_you_mean", _model("param gamma = 1\nvar x\nder(x) = -gama*x"), "UnknownName", 4, 13, "did you mean `gamma`"),
    ("unknown_function_did_you_mean", _plain("sine(x)"), "UnknownFunction", 3, 12, "did you mean `sin`"),
    ("unknown_attribute_of_body", _model("space 2\nbody b = point(mass = 1)\ngravity b.z"), "UnknownName", 4, 11, "no attribute `z`"),
    ("duplicate_param", _model("param k = 1, k = 2\nvar x\nder(x) = -k*x"), "DuplicateDefinition", 2, 16, "on line 2"),
    ("param_and_var_share_a_name", _model("param x = 1\nvar x\nder(x) = -x"), "DuplicateDefinition", 3, 7, "already declared"),
    ("const_and_param_share_a_name", _model("const N = 2\nparam N = 1\nvar x\nder(x) = -x"), "DuplicateDefinition", 3, 9, "as a `const`"),
    ("two_models_one_name", _plain("-x") + _plain("-x"), "DuplicateDefinition", 5, 7, "model `A` is defined twice"),
    ("builtin_name_redeclared", _model("var t\nder(t) = 1"), "ReservedName", 2, 7, "built-in"),
    ("summation_index_shadows", _plain("sum(x for x in 1..3)"), "DuplicateDefinition", 3, 12, "summation index `x`"),
    ("output_used_in_model", _model("var x\nder(x) = -y\noutput y = 2*x"), "NotAllowedHere", 3, 13, "output"),
    # ---- arity
    ("sin_of_two_arguments", _model("var x, y\nder(x) = sin(x, y)\nder(y) = 0"), "WrongArity", 3, 12, "takes 1 argument, got 2"),
    ("atan2_of_one_argument", _plain("atan2(x)"), "WrongArity", 3, 12, "takes 2 arguments, got 1"),
    ("array_value_too_short", _model("param m[1..3] = [1, 2]\nvar x\nder(x) = -x"), "WrongArity", 2, 19, "3 elements but 2 values"),
    ("link_with_one_point", _model("space 2\nbody b = point(mass = 1)\nlink b"), "WrongArity", 4, 3, "connects two points, got 1"),
    ("network_called_inconsistently", _model("var x, y\nnn V: mlp(hidden = [4])\nder(x) = V(x)\nder(y) = V(x, y)"), "WrongArity", 5, 12, "2 inputs here but with 1"),
    # ---- arrays and bounds
    ("descending_bounds", _model("param m[3..1] = 1\nvar x\nder(x) = -x"), "BadArrayBounds", 2, 10, "below the lower one"),
    ("bound_is_a_param", _model("param N = 3\nparam m[1..N] = 1\nvar x\nder(x) = -x"), "NotConstant", 3, 14, "const N ="),
    ("bound_is_a_param_declared_later", _model("param m[1..N] = 1\nparam N = 3\nvar x\nder(x) = -x"), "NotConstant", 2, 14, "is a param"),
    ("bound_is_not_an_integer", _model("param m[1..2.5] = 1\nvar x\nder(x) = -x"), "NotInteger", 2, 14, "must be an integer"),
    ("index_out_of_range", _model("param m[1..3] = 1\nvar x\nder(x) = -m[4]*x"), "BadIndex", 4, 13, "index 4 is outside `m[1..3]`"),
    ("scalar_indexed", _plain("x[1]"), "TypeMismatch", 3, 12, "`x` is not an array"),
    ("loop_too_long", _model("var x\nder(x) = -x\n0 = 0 for i in 1..1000, j in 1..1000"), "BadArrayBounds", 4, 13, "more than 100000"),
    ("cyclic_consts", _model("const N = M, M = N\nvar x\nder(x) = -x"), "CyclicDefinition", 2, 9, "N -> M -> N"),
    ("const_not_an_integer", _model("const N = 2.5\nvar x\nder(x) = -x"), "NotInteger", 2, 13, "must be an integer"),
    ("loop_variable_twice", _model("var x[1..3]\nder(x[i]) = -x[i] for i in 1..3, i in 1..2"), "DuplicateDefinition", 3, 36, "appears twice"),
    ("loop_variable_shadows_a_name", _model("var x\nder(x) = -x for x in 1..2"), "DuplicateDefinition", 3, 19, "already a name"),
    ("cyclic_outputs", _model("var x\nder(x) = -x\noutput y = z, z = y"), "CyclicDefinition", 4, 10, "in terms of itself"),
    ("array_plus_scalar", _plain("[1, 2] + x"), "TypeMismatch", 3, 12, "cannot add a vector of length 2 and a scalar"),
    # ---- derivatives and constraints
    ("velocity_constraint_not_linear", _model("coord x\nlagrangian der(x)^2/2\nconstraint der(x)^2 = 1"), "BadConstraint", 4, 3, "not linear in the velocities"),
    ("velocity_constraint_affine", _model("coord x, y\nlagrangian der(x)^2/2 + der(y)^2/2\nconstraint der(x) = 1"), "BadConstraint", 4, 3, "affine"),
    ("second_derivative", _model("var x\nder(der(x)) = -x"), "BadDerivative", 3, 7, "der(der(...))"),
    ("derivative_of_param", _model("param k = 1\nvar x\nder(k) = -x"), "BadDerivative", 4, 7, "not `k`"),
    ("derivative_in_potential", _model("space 2\nbody b = point(mass = 1)\npotential der(b.x)"), "NotAllowedHere", 4, 13, "der(...)"),
    # ---- formalism (found by the lowering)
    ("plain_equation_and_structure", _model("var q, p, z\nder(z) = 1\nhamiltonian q^2/2 + p^2/2\nstructure J = [[0, 1], [-1, 0]]"),
     "MixedFormalism", 3, 3, "port-Hamiltonian"),
    ("unbalanced_plain_system", _model("var x, y\nder(x) = -x"), "UnbalancedSystem", 2, 10, "1 algebraic variable (y) but 0"),
    ("hamiltonian_without_momenta", _model("coord q\nhamiltonian q^2/2"), "UnbalancedSystem", 3, 3, "1 coordinate but 0 momenta"),
    # ---- Cartesian mechanics
    ("rigid_body_too_big_for_space", _model("space 2\nbody r = rigid(dim = 3, mass = 1, moments = [1, 1, 1])"), "BadDimension", 3, 24, "space is 2-dimensional"),
    ("link_from_body_to_itself", _model("space 2\nbody b = point(mass = 1)\nlink b, b, length = 1"), "SelfConnection", 4, 3, "to itself"),
    ("hinge_on_point_mass", _model("space 2\nbody b = point(mass = 1)\nhinge ground, b, axis = [0, 1]"), "NotARigidBody", 4, 3, "point mass `b`"),
    ("point_mass_has_no_body_points", _model("space 2\nbody b = point(mass = 1)\njoint ground, b.at([1])"), "NotARigidBody", 4, 17, "no body-fixed points"),
    ("unknown_body_kind", _model("body b = box(mass = 1)"), "UnknownBodyKind", 2, 12, "unknown body kind `box`"),
    ("spring_without_stiffness", _model("space 2\nbody b = point(mass = 1)\nspring ground, b"), "MissingArgument", 4, 3, "needs `k = ...`"),
    ("zero_mass", _model("space 2\nbody b = rigid(dim = 1, mass = 0, moments = [1])"), "BadArgument", 3, 34, "must be positive"),
    ("zero_mass_from_param_default", _model("space 2\nparam m = 0\nbody b = point(mass = m)\ngravity 9.81"), "BadArgument", 4, 25, "default parameter values"),
    ("inertia_violates_triangle_inequality", _model("space 3\nbody r = rigid(dim = 3, mass = 1, inertia = [1, 1, 3])"), "BadArgument", 3, 47, "triangle inequality"),
    ("moment_depends_on_time", _model("space 3\nbody top = rigid(dim = 3, mass = 1, moments = [1.0, t, 0.5])\njoint ground, top.at([0, 0, -1])"), "NotAllowedHere", 3, 49, "depends on `t`"),
    ("mass_depends_on_a_state", _model("space 2\nbody b = point(mass = b.x^2 + 1)\ngravity 1"), "NotAllowedHere", 3, 25, "depends on `b.x`"),
    ("link_of_zero_length", _model("space 2\nbody b = point(mass = 1)\nlink ground, b, length = 0"), "BadArgument", 4, 28, "joint A, B"),
    ("force_on_a_velocity", _model("coord q\nlagrangian der(q)^2/2\nforce 1 on der(q)"), "TypeMismatch", 4, 14, "on a coordinate"),
    ("space_of_five_dimensions", _model("space 5\nvar x\nder(x) = -x"), "BadDimension", 2, 9, "1, 2 or 3"),
    # ---- values
    ("division_by_literal_zero", _plain("x / 0"), "DivisionByZero", 3, 16, "division by zero"),
    ("square_root_of_negative", _plain("sqrt(-1) * x"), "NotReal", 3, 12, "not a real number"),
    ("odd_root_of_negative", _plain("(-8)^(1/3) * x"), "NotReal", 3, 12, "this power"),
    ("number_too_small", _plain("1e-400 * x"), "BadNumber", 3, 12, "floating-point"),
    ("nesting_too_deep", _plain("-" * 150 + "x"), "NestingTooDeep", 3, 109, "nested too deeply"),
    # ---- port-Hamiltonian networks
    ("junction_kind_misspelled", _model("param m = 1\nflow_store mass(p) energy p^2/(2*m)\njunction commom_effort(mass, mass)"), "UnknownJunctionKind", 4, 12, "did you mean `common_effort`"),
    ("junction_member_is_a_param", _model("param m = 1\nflow_store mass(p) energy p^2/(2*m)\njunction common_effort(mass, m)"), "TypeMismatch", 4, 32, "a junction joins elements"),
    ("junction_names_a_missing_port", _model("param m = 1\nflow_store mass(p) energy p^2/(2*m)\ntransformer tr(a, b): e_a = 2*e_b\njunction common_effort(mass, tr.c)"), "UnknownName", 5, 32, "no port `c`"),
    ("store_energy_unknown_name", _model("flow_store mass(p) energy p^2/(2*mm)"), "UnknownName", 2, 36, "unknown name `mm`"),
    ("port_domain_unknown", _model("port p: magnetic\nvar x\nder(x) = -x"), "UnknownDomain", 2, 11, "magnetic"),
]


def _first_error(text: str, path: str = "bad.phm") -> PdslError:
    """Parse, resolve and lower every model of ``text``; the PdslError that stops it."""
    with pytest.raises(PdslError) as info:
        for model in load_models(path, text=text):
            lower(model)
    return info.value


def test_the_table_is_large_and_its_names_unique():
    assert len(ERRORS) >= 30
    assert len({row[0] for row in ERRORS}) == len(ERRORS)


@pytest.mark.parametrize("name, text, code, line, col, fragment", ERRORS, ids=[row[0] for row in ERRORS])
def test_error(name, text, code, line, col, fragment):
    err = _first_error(text)
    first = err.diagnostics[0]
    where = (first.code, first.span.line, first.span.col) if first.span else (first.code, None, None)
    assert where == (code, line, col), render(err.diagnostics)
    assert fragment in first.message + " " + (first.hint or ""), render(err.diagnostics)
    assert first.span.path == "bad.phm"


@pytest.mark.parametrize("name, text, code, line, col, fragment", ERRORS, ids=[row[0] for row in ERRORS])
def test_error_renders_with_a_caret(name, text, code, line, col, fragment):
    shown = render(_first_error(text).diagnostics[:1])
    head, *rest = shown.splitlines()
    assert head.startswith(f"bad.phm:{line}:{col}: error[{code}]: ")
    assert rest and rest[0].startswith(f"{line:>4} | ")
    caret = rest[1]
    assert caret.strip() and set(caret.strip()) == {"^"}
    assert caret.index("^") == len(f"{line:>4} | ") + col - 1


def test_python_payloads_never_run(tmp_path):
    marker = tmp_path / "pwned"
    payloads = [
        f"__import__('os').system('touch {marker}')",
        f'exec("open(\\"{marker}\\", \\"w\\")")',
        f'eval("1"); open("{marker}", "w")',
        "__import__(os).system(x)",
    ]
    for payload in payloads:
        with pytest.raises(PdslError) as info:
            load_models("bad.phm", text=_plain(payload))
        assert info.value.diagnostics[0].span is not None
    assert not marker.exists()


def test_several_errors_are_collected_and_sorted():
    text = _model(
        """
        param k = 1
        var x, v
        der(v) = -k*xx
        der(x) = vv
        param k = 2
        """
    )
    err = _first_error(text)
    got = [(d.code, d.span.line, d.span.col) for d in err.diagnostics]
    assert got == [
        ("UnknownName", 4, 15),
        ("UnknownName", 5, 12),
        ("DuplicateDefinition", 6, 9),
    ]
    assert render(err.diagnostics).endswith("3 errors")


def test_errors_of_several_models_are_collected():
    text = _plain("y") + _model("var z\nder(z) = w", name="B")
    err = _first_error(text)
    assert [(d.code, d.span.line) for d in err.diagnostics] == [("UnknownName", 3), ("UnknownName", 7)]


def test_lowering_errors_through_compile_model():
    with pytest.raises(PdslError) as info:
        compile_model("bad.phm", text=_model("var x, y\nder(x) = -x"))
    assert info.value.codes == ["UnbalancedSystem"]
    with pytest.raises(PdslError) as info:
        compile_model("bad.phm", text=_model("var q, p, z\nder(z) = 1\nhamiltonian q^2/2 + p^2/2\nstructure J = [[0, 1], [-1, 0]]"))
    assert info.value.codes[0] == "MixedFormalism"
    # a Lagrangian part and a plain part compose (LANGUAGE.md §10)
    system = compile_model("ok.phm", text=_model("coord x\nvar y\nder(y) = 1\nlagrangian der(x)^2/2")).system
    assert [s.name for s in system.states] == ["x", "der(x)", "y"]


def test_diagnostics_quote_the_file_on_disk(tmp_path):
    path = tmp_path / "bad.phm"
    path.write_text(_plain("-gama*x"), encoding="utf-8")
    with pytest.raises(PdslError) as info:
        load_models(path)
    shown = render(info.value.diagnostics)
    assert shown.startswith(f"{path}:3:13: error[UnknownName]: unknown name `gama`")
    assert "der(x) = -gama*x" in shown


@pytest.mark.parametrize("text", ["", "# nothing here\n", "\n\n"])
def test_a_file_without_models_is_not_an_error_of_the_front_end(text):
    assert load_models("empty.phm", text=text) == ()


def test_unknown_const_override_is_an_error():
    with pytest.raises(PdslError) as info:
        load_models("m.phm", text=_model("const N = 2\nvar x[1..N]\nder(x[i]) = -x[i] for i in 1..N"), consts={"M": 3})
    first = info.value.diagnostics[0]
    assert first.code == "UnknownName" and "--const M" in first.message
    assert "N" in (first.hint or "")


def test_path_objects_and_strings_name_the_same_file():
    err = _first_error(_plain("y"), path=str(Path("dir") / "bad.phm"))
    assert err.diagnostics[0].span.path == str(Path("dir") / "bad.phm")


def test_equation_nonlinear_in_der_is_reported():
    err = _first_error(_model("var x\nder(x)^2 = x"))
    assert ("NonlinearDerivative", 3) in [(d.code, d.span.line) for d in err.diagnostics]
