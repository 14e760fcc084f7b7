"""Arrays of port-Hamiltonian elements: indexed element names with `for` clauses (issue 6).

`flow_store cap[i](q[i]) energy ... for i in 1..N` declares the elements cap[1..N] with states q[1..N]; junction members
name one element each (`cap[i]`, `branch[k+1]`, `tr[i].a`). Every entry resolves to an ordinary Element record named
`cap[3]` (ports `cap[3].e`, `cap[3].f`), so the lowering has no special case. Mistakes give one located diagnostic.
"""

from __future__ import annotations

import textwrap

import pytest
import sympy as sp

from pdsl import symbols as S
from pdsl.diagnostics import PdslError, render
from pdsl.lower import lower
from pdsl.pipeline import load_models


def _model(body: str) -> str:
    """``model A`` around an indented body (the body's first line is line 2)."""
    return "model A\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "  ") + "\nend\n"


def _load(body: str, consts=None):
    (m,) = load_models("arr.phm", text=_model(body), consts=consts)
    return m


def _error(body: str) -> PdslError:
    with pytest.raises(PdslError) as info:
        lower(_load(body))
    return info.value


# A chain of N masses (effort stores, velocity = flow) joined by springs, the first one pushed: written with arrays.
CHAIN = """
const N = 4
param m[1..N] = 1.0, k = 2.0
input F
effort_source push = F
effort_store mass[i](p[i]) energy p[i]^2/(2*m[i]) for i in 1..N
flow_store spring[i](x[i]) energy k*x[i]^2/2 for i in 1..N-1
junction v[i]: common_flow(mass[i], s[i]) for i in 1..N-1
junction v[N]: common_flow(mass[N], -push)
junction s[i]: common_effort(spring[i], v[i+1]) for i in 1..N-1
"""


def test_indexed_elements_become_ordinary_elements():
    m = _load(CHAIN)
    stores = [e for e in m.elements if e.kind == "store"]
    assert [e.name for e in stores] == ["mass[1]", "mass[2]", "mass[3]", "mass[4]", "spring[1]", "spring[2]", "spring[3]"]
    assert stores[2].state == S.sym("p[3]")
    assert sp.simplify(stores[2].energy - S.sym("p[3]") ** 2 / (2 * S.sym("m[3]"))) == 0
    junctions = {e.name: e for e in m.elements if e.kind == "junction"}
    assert set(junctions) == {"v[1]", "v[2]", "v[3]", "v[4]", "s[1]", "s[2]", "s[3]"}
    assert junctions["s[2]"].members[1][:2] == (1, "v[3]")  # `v[i+1]` evaluated in the loop
    assert junctions["v[4]"].members[1][:2] == (-1, "push")


def test_indexed_chain_lowers_to_the_hand_written_ode():
    """The force balance of a spring chain, derived by hand from the bond layout: spring i (elongation rate
    v_i − v_{i+1}) pulls mass i back and mass i+1 forward with k·x[i]; the last mass is pushed by F."""
    system = lower(_load(CHAIN))
    rhs = {s.name: eq.rhs for s, eq in zip(system.states, system.differential)}
    p = [S.sym(f"p[{i}]") for i in range(1, 5)]
    x = [S.sym(f"x[{i}]") for i in range(1, 4)]
    m = [S.sym(f"m[{i}]") for i in range(1, 5)]
    k, F = S.sym("k"), S.sym("F")
    v = [p[i] / m[i] for i in range(4)]
    want = {
        "p[1]": -k * x[0], "p[2]": k * x[0] - k * x[1], "p[3]": k * x[1] - k * x[2], "p[4]": F + k * x[2],
        "x[1]": v[0] - v[1], "x[2]": v[1] - v[2], "x[3]": v[2] - v[3],
    }
    assert set(rhs) == set(want)
    for name, expr in want.items():
        assert sp.simplify(rhs[name] - expr) == 0, (name, rhs[name])


def test_array_with_a_first_section_apart_and_gaps_in_use():
    """Statements may each declare part of one array (the first section apart); state arrays are usable in
    expressions once they have no gaps."""
    m = _load("""
        const N = 3
        param C = 1.0
        flow_store cap[1](q[1]) energy q[1]^2/(2*C)
        flow_store cap[i](q[i]) energy q[i]^2/(4*C) for i in 2..N
        resistive r[i]: e = f for i in 1..N
        junction common_effort(cap[i], r[i]) for i in 1..N
        output total = sum(q)
    """)
    assert [e.name for e in m.elements if e.kind == "store"] == ["cap[1]", "cap[2]", "cap[3]"]
    (out,) = m.outputs
    assert out.expr == S.sym("q[1]") + S.sym("q[2]") + S.sym("q[3]")


def test_two_port_arrays_and_const_override():
    body = """
        const N = 2
        param n = 2.0
        flow_store a[i](qa[i]) energy qa[i]^2/2 for i in 1..N
        flow_store b[i](qb[i]) energy qb[i]^2/2 for i in 1..N
        resistive r[i]: e = f for i in 1..N
        transformer tr[i](x, y): e_x = n*e_y for i in 1..N
        junction common_effort(a[i], r[i], tr[i].x) for i in 1..N
        junction common_effort(-tr[i].y, b[i]) for i in 1..N
    """
    m = _load(body, consts={"N": 3})
    tps = [e for e in m.elements if e.kind == "twoport"]
    assert [e.name for e in tps] == ["tr[1]", "tr[2]", "tr[3]"]
    assert tps[2].e_a == S.sym("tr[3].x.e")
    system = lower(m)
    assert len(system.states) == 6


def test_member_loop_expands_in_the_junction_list():
    """`common_effort(cap[i] for i in 1..N, -src)`: N members and one more, signs kept, N from --const."""
    m = _load("""
        const N = 3
        input V
        resistive r[i]: e = f for i in 1..N
        effort_source src = V
        junction n[k]: common_effort(-src, r[i] for i in 1..k) for k in N..N
    """, consts={"N": 4})
    (j,) = [e for e in m.elements if e.kind == "junction"]
    assert j.name == "n[4]"
    assert [(sign, port) for sign, port, _ in j.members] == [(-1, "src")] + [(1, f"r[{i}]") for i in range(1, 5)]


# (name, body, code, line, col, fragment); the body's first line is line 2
ERRORS = [
    ("member_index_out_of_range",
     "const N = 3\nflow_store c[i](q[i]) energy q[i]^2/2 for i in 1..N\nresistive r[i]: e = f for i in 1..N\n"
     "junction common_effort(c[i], r[i+1]) for i in 1..N",
     "BadIndex", 5, 32, "`r[4]` is not declared"),
    ("index_declared_twice",
     "flow_store c[i](q[i]) energy q[i]^2/2 for i in 1..3\nflow_store c[2](z) energy z^2/2",
     "DuplicateDefinition", 3, 14, "`c[2]` is declared twice (first on line 2)"),
    ("loop_over_a_scalar_name",
     "resistive r: e = f for i in 1..3",
     "DuplicateDefinition", 2, 13, "index the name, as `r[i]`"),
    ("loop_over_a_scalar_state",
     "flow_store c[i](q) energy q^2/2 for i in 1..3",
     "DuplicateDefinition", 2, 19, "store state `q` 3 times"),
    ("array_without_index_in_junction",
     "flow_store c[i](q[i]) energy q[i]^2/2 for i in 1..2\nresistive r: e = f\njunction common_effort(c, r)",
     "TypeMismatch", 4, 26, "index it, as `c[1]`"),
    ("index_on_a_single_element",
     "flow_store c(q) energy q^2/2\nresistive r: e = f\njunction common_effort(c, r[1])",
     "TypeMismatch", 4, 29, "`r` is a single element"),
    ("index_from_a_parameter",
     "param k = 1\nresistive r[k]: e = f",
     "NotConstant", 3, 15, "`k` is a param"),
    ("two_indices",
     "resistive r[1, 2]: e = f",
     "WrongArity", 2, 13, "one index"),
    ("gap_in_the_declared_indices",
     "flow_store c[1](q[1]) energy q[1]^2/2\nflow_store c[3](q[3]) energy q[3]^2/2\nresistive r: e = f\n"
     "junction common_effort(c[1], c[2], r)",
     "BadIndex", 5, 32, "has indices 1, 3"),
    ("sum_over_a_state_array_with_a_gap",
     "flow_store c[1](q[1]) energy q[1]^2/2\nflow_store c[3](q[3]) energy q[3]^2/2\noutput total = sum(q)",
     "TypeMismatch", 4, 22, "with gaps"),
    ("element_array_in_arithmetic",
     "flow_store c[i](q[i]) energy q[i]^2/2 for i in 1..2\noutput y = c[1] + 1",
     "TypeMismatch", 3, 14, "can only appear in a junction"),
    ("junction_lists_itself",
     "resistive r[i]: e = f for i in 1..2\njunction n[i]: common_effort(r[i], n[i]) for i in 1..2",
     "TypeMismatch", 3, 38, "lists itself"),
    ("range_as_element_name",
     "flow_store cap[1..3](q) energy q^2/2",
     "Syntax", 2, 18, "`cap[i] ... for i in 1..3`"),
    ("empty_array_named_in_junction",
     "const N = 1\nresistive r[i]: e = f for i in 2..N\nresistive s: e = f\njunction common_effort(s, r[1])",
     "BadIndex", 5, 29, "has indices none"),
    ("member_loop_variable_clashes",
     "resistive r[i]: e = f for i in 1..2\njunction common_effort(r[i] for i in 1..2) for i in 1..1",
     "DuplicateDefinition", 3, 26, "`i` is already a name here"),
    ("member_loop_out_of_range",
     "resistive r[i]: e = f for i in 1..2\njunction common_effort(r[i] for i in 1..3)",
     "BadIndex", 3, 26, "`r[3]` is not declared"),
    ("array_name_clashes_with_param",
     "param c = 1\nresistive c[i]: e = f for i in 1..2",
     "DuplicateDefinition", 3, 13, "`c` is already declared"),
]


@pytest.mark.parametrize("name, body, code, line, col, fragment", ERRORS, ids=[e[0] for e in ERRORS])
def test_array_errors_are_located(name, body, code, line, col, fragment):
    err = _error(body)
    first = err.diagnostics[0]
    assert (first.code, first.span.line, first.span.col) == (code, line, col), render(err.diagnostics)
    assert fragment in first.message + " " + (first.hint or ""), render(err.diagnostics)
    shown = render(err.diagnostics[:1])
    assert shown.startswith(f"arr.phm:{line}:{col}: error[{code}]: ")
    assert "^" in shown.splitlines()[2]
