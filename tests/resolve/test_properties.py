"""Fuzzing the front end: a mutated model fails with a PdslError or not at all.

Valid models (LANGUAGE.md §8 and a few plain, Hamiltonian, Lagrangian and
Cartesian ones) are mutated at random (characters, tokens, lines, names) and
pushed through ``load_models`` and ``lower``. The only exception allowed is a
:class:`PdslError` whose diagnostics render and point inside the text; a hang
counts as a failure (a hard alarm after 60 s). The per-example deadline is
generous (20 s; an example takes ~30 ms) so that a loaded machine never fails
it: the hangs the fuzzer found ran for minutes.

CI runs a fixed set of examples (``derandomize``); set ``PDSL_FUZZ_EXAMPLES=5000``
for a fresh random campaign.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pdsl.diagnostics import PdslError, render
from pdsl.lower import lower
from pdsl.pipeline import load_models

SECTION_8 = (Path(__file__).resolve().parents[1] / "parse" / "language_section8.phm").read_text(encoding="utf-8")

EXTRA_SEEDS = [
    """model H
  coord q
  momentum p
  hamiltonian p^2/2 + q^4/4 - q^2/2
end
""",
    """model Oscillator "plain ODE with an input and an output"
  param k = 1.0 {free, lower = 0}, c = 0.1
  input F
  var x = 1.0, v
  output E = v^2/2 + k*x^2/2
  der(x) = v
  der(v) = -k*x - c*v + F
end
""",
    """model Dae
  var x = 1, y
  der(x) = -y
  0 = y - x^2
end
""",
    """model Decay "array of states"
  const N = 3
  param c[1..N] = [1, 2, 3]
  var x[1..N]
  der(x[i]) = -c[i]*x[i] for i in 1..N
  output total = sum(x[j] for j in 1..N)
end
""",
    """model Pendulum "Lagrangian with a generalized force"
  param g = 9.81, l = 1.0, d = 0.1
  coord q = 0.5
  lagrangian l^2/2*der(q)^2 + g*l*cos(q)
  force -d*der(q) on q
end
""",
    """model Hanging "one point mass on a spring"
  space 2
  param k = 2.0, c = 0.1
  input F
  body b = point(mass = 1)
  spring ground, b, k = k, rest = 1
  damper ground, b, c = c
  force [F, 0] on b
  gravity 9.81
end
""",
    """model Learned
  var x, v
  nn f: mlp(hidden = [8], act = tanh, out = 2)
  der(x) = v
  der(v) = f(x, v)[1] - x
end
""",
]


def _split_models(text: str) -> list[str]:
    return [m + "\n" for m in re.findall(r"^model .*?^end\s*$", text, flags=re.M | re.S)]


MODELS = Path(__file__).resolve().parents[2] / "models"
# every bundled model whose lowering is quick (cucker_smale, N = 30, takes seconds per example)
BUNDLED = [p.read_text(encoding="utf-8") for p in sorted(MODELS.glob("*.phm")) if p.stem != "cucker_smale"]
COMP = MODELS / "composition"


def _inline(assembly: str, *libs: str) -> str:
    """An assembly with the library files it imports written into the same text (a seed is one text)."""
    text = (COMP / assembly).read_text(encoding="utf-8")
    text = "\n".join(line for line in text.splitlines() if not line.startswith('import "lib/'))
    return "\n".join((COMP / "lib" / lib).read_text(encoding="utf-8") for lib in libs) + "\n" + text + "\n"


# composition (LANGUAGE.md §9–§10): several models per text, instances, ports, connections, `std:` imports
COMPOSED = [
    _inline("a1_two_links.phm", "links.phm"),
    _inline("a2_ladder.phm", "sections.phm"),
    _inline("a3_motor_pendulum.phm", "motor.phm"),
    _inline("a4_spring_damper_bodies.phm", "translational.phm"),
    (COMP / "a5_controlled_rotor.phm").read_text(encoding="utf-8"),
    (COMP / "a6_voice_coil.phm").read_text(encoding="utf-8"),
    (COMP / "std_circuits.phm").read_text(encoding="utf-8"),
    (COMP / "analogies.phm").read_text(encoding="utf-8"),
    (COMP / "gear.phm").read_text(encoding="utf-8"),
]
STD = MODELS / "std"


def _std(*libs: str) -> str:
    return "\n".join((STD / f"{lib}.phm").read_text(encoding="utf-8") for lib in libs) + "\n"


def _model_of(path: Path, name: str) -> str:
    """The block of model ``name`` in ``path``, library prefixes (``el.Resistor``) dropped: its library is inlined."""
    text = next(m for m in _split_models(path.read_text(encoding="utf-8")) if re.match(rf"model {name}\b", m))
    return re.sub(r"\b(el|tr|rot)\.(?=[A-Z])", "", text)


# the component library (models/std, what `import "std:..."` reads): each file alone, and assemblies with the
# library files they import written into the text, so that mutations reach the library's models in use
STD_SEEDS = [
    *(p.read_text(encoding="utf-8") for p in sorted(STD.glob("*.phm"))),
    _std("electrical") + _model_of(COMP / "std_circuits.phm", "SeriesRLC"),
    _std("translational") + _model_of(COMP / "std_circuits.phm", "Oscillator"),
    _std("motor", "rotational") + _model_of(COMP / "std_circuits.phm", "MotorLoad"),
    _std("motor", "rotational") + _model_of(COMP / "analogies.phm", "Flywheel"),
    _std("mechanics") + _model_of(COMP / "a1_two_links.phm", "TwoLinks"),
    _std("signals") + """model FilteredRotor "a rotor under the std:signals PID; its reference a filtered, scaled step and a sine"
  space 2
  body wheel = rigid(dim = 2, mass = 1.0, moments = [0.5, 0.5])
  joint pivot: ground, wheel
  port axle: rotational = pivot.rate
  use step = SmoothStep(height = 1.0, t0 = 0.5, w = 0.1)
  use filt = FirstOrder(T = 0.2, u = step.y)
  use ref = Gain(k = 2.0, u = filt.y)
  use wobble = Sine(amplitude = 0.1, freq = 0.5)
  use ctrl = PID(kp = 11, ki = 6, kd = 6, r = ref.y + wobble.y, y = pivot.angle, ydot = pivot.rate)
  force ctrl.u on axle
  output theta = pivot.angle
end
""",
]
SEEDS = _split_models(SECTION_8) + EXTRA_SEEDS + BUNDLED + COMPOSED + STD_SEEDS
SECTION_8_GYROSCOPE = next(s for s in SEEDS if s.startswith("model Gyroscope"))

# ---------------------------------------------------------------- mutations
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+\.?\d*(?:[eE][+-]?\d+)?|\.\.|\s+|.", re.S)
_ALPHABET = "abxyzNi0123456789.,:;=+-*/^()[]{}#\"' \n\t_eE@!\\é"
_VOCABULARY = [
    "model", "end", "const", "param", "var", "coord", "momentum", "input", "output", "space", "body", "link",
    "joint", "hinge", "spring", "damper", "gravity", "potential", "force", "on", "lagrangian", "hamiltonian",
    "constraint", "nn", "mlp", "flow_store", "junction", "common_effort", "port", "use", "connect", "import",
    "for", "in", "der", "t", "ground", "pi", "i", "j", "N", "sin", "atan2", "sum", "dot", "norm", "cross",
    "0", "1", "-1", "2.5", "1e999", "1e-3", "10^10^10", "(", ")", "[", "]", "{", "}", ",", "=", "+", "-", "*",
    "/", "^", ".", "..", ":", " for i in 1..3", "\n", "#", '"s"', "sum(", ".at([0, 0, 1])", "[1, 2]",
    "[[1, 0], [0, 1]]", "point(mass = 1)", "rigid(dim = 2, mass = 1, moments = [1, 2])", "der(", "x", "q", "p",
]


def _spot(draw, n: int) -> int:
    """A position anywhere in a sequence of n items (integers(0, n - 1) would favour the start)."""
    return draw(st.randoms(use_true_random=True)).randrange(max(n, 1))


def _chars(draw, text: str) -> str:
    i = _spot(draw, len(text) + 1)
    kind = draw(st.sampled_from(["delete", "insert", "replace"]))
    new = draw(st.text(alphabet=_ALPHABET, min_size=1, max_size=4))
    cut = draw(st.integers(1, 6)) if kind != "insert" else 0
    return text[:i] + ("" if kind == "delete" else new) + text[i + cut:]


def _tokens(draw, text: str) -> str:
    toks = _TOKEN.findall(text)
    i, j = _spot(draw, len(toks)), _spot(draw, len(toks))
    kind = draw(st.sampled_from(["delete", "duplicate", "replace", "swap", "copy"]))
    if kind == "delete":
        toks[i] = ""
    elif kind == "duplicate":
        toks[i] = toks[i] * 2
    elif kind == "replace":
        toks[i] = draw(st.sampled_from(_VOCABULARY))
    elif kind == "swap":
        toks[i], toks[j] = toks[j], toks[i]
    else:
        toks[i] = toks[j]
    return "".join(toks)


_WORDS = [
    "x", "y", "q", "p", "v", "N", "i", "j", "k", "m", "b", "b1", "b[1]", "top", "ground", "t", "pi", "F", "g",
    "0", "1", "2", "-1", "0.5", "[1, 2]", "[1, 2, 3]", "[0, 0, 1]", "der(x)", "der(q)", "b1.x", "top.at([0, 0, 1])",
    "sin(x)", "V(b1)", "sum(m[j] for j in 1..N)",
]


def _words(draw, text: str) -> str:
    """Replace one name or number by another name, number or small expression (keeps the syntax)."""
    toks = _TOKEN.findall(text)
    spots = [k for k, tok in enumerate(toks) if re.fullmatch(r"[A-Za-z_]\w*|\d[\d.eE+-]*", tok)]
    k = spots[_spot(draw, len(spots))]
    toks[k] = draw(st.sampled_from(_WORDS + toks))
    return "".join(toks)


_EXTREMES = ["1e308", "-1e308", "1e-320", "5e-324", "1e-300", "1e300", "0", "-0", "0.0", "1e16", "123456789012345678901234567890"]


def _numbers(draw, text: str) -> str:
    """Replace one number by an extreme one: overflow, denormals, zero (found LinAlgErrors in the lowering)."""
    toks = _TOKEN.findall(text)
    spots = [k for k, tok in enumerate(toks) if re.fullmatch(r"\d[\d.eE+-]*", tok)]
    if not spots:
        return text
    toks[spots[_spot(draw, len(spots))]] = draw(st.sampled_from(_EXTREMES))
    return "".join(toks)


def _lines(draw, text: str) -> str:
    lines = text.split("\n")
    i, j = _spot(draw, len(lines)), _spot(draw, len(lines))
    kind = draw(st.sampled_from(["drop", "duplicate", "swap", "move"]))
    if kind == "drop":
        del lines[i]
    elif kind == "duplicate":
        lines.insert(j, lines[i])
    elif kind == "swap":
        lines[i], lines[j] = lines[j], lines[i]
    else:
        lines.insert(j, lines.pop(i))
    return "\n".join(lines)


def _names(draw, text: str) -> str:
    names = sorted(set(re.findall(r"[A-Za-z_]\w*", text)))
    a, b = draw(st.sampled_from(names)), draw(st.sampled_from(names + _VOCABULARY[:45]))
    if draw(st.booleans()):  # rename every a to b
        return re.sub(rf"\b{re.escape(a)}\b", b, text)
    return re.sub(rf"\b({re.escape(a)}|{re.escape(b)})\b", lambda m: b if m.group() == a else a, text)  # swap


_STATEMENTS = [
    "const {A} = {N}", "param {A} = {V}", "param {A}[1..{N}] = {V}", "var {A}", "var {A}[1..{N}]", "coord {A}",
    "momentum {A}", "input {A}", "input {A} = {E}", "output {A} = {E}", "space {N}", "nn {A}: mlp(hidden = [{N}], out = {N})",
    "body {A} = point(mass = {V})", "body {A}[1..{N}] = point(mass = {V})",
    "body {A} = rigid(dim = {N}, mass = {V}, moments = [{V}, {V}, {V}])",
    "body {A} = rigid(dim = {N}, mass = {V}, inertia = [{V}, {V}, {V}])",
    "link {B}, {B}, length = {V}", "joint {B}, {B}", "hinge {B}, {B}, axis = [0, 0, 1]", "spring {B}, {B}, k = {V}, rest = {V}",
    "damper {B}, {B}, c = {V}", "gravity {V}", "gravity {V} along [{V}, {V}]", "potential {E}", "force {E} on {B}",
    "force [{E}, {E}] on {B}", "lagrangian {E}", "hamiltonian {E}", "constraint {E} = {E}", "der({A}) = {E}", "0 = {E}",
    "der({A}[i]) = {E} for i in 1..{N}", "{E} = {E} for i in 1..{N}, j in i..{N}",
    "flow_store {A}({A}) energy {E}", "effort_store {A}({A}) energy {E}", "resistive {A}: f = {V}*e",
    "flow_source {A} = {E}", "transformer {A}(a, b): e_a = {V}*e_b", "junction common_effort({A}, -{A})",
    "junction {A}: common_flow({A}, {A}.a)", "structure J = [[0, 1], [-1, 0]]", "distribution learn {A}: mlp(hidden = [2])",
    "group SE2({A}, {A}, {A})", "port {A}", "use {A} = {A}()", "connect {B}, {B}",
]
_EXPRESSIONS = [
    "{A}", "{V}", "der({A})", "{A}^2/2", "-{A}*{A}", "sin({A})", "{A}[{N}]", "{A}.x", "{A}.at([{V}, {V}])", "norm({A})",
    "dot({A}, {A})", "{A}({A}, {A})", "sum({A}[j] for j in 1..{N})", "[{A}, {A}]", "t", "{A} / ({A} - {A})", "sqrt({V})",
]


def _statement(draw, text: str) -> str:
    """Insert a statement built from a template, with names taken from the model."""
    names = sorted(set(re.findall(r"[A-Za-z_]\w*", text)) - {"model", "end"}) or ["x"]

    def fill(template: str, depth: int = 0) -> str:
        def one(m):
            kind = m.group(1)
            if kind == "A":
                return draw(st.sampled_from(names))
            if kind == "B":
                return draw(st.sampled_from(names + ["ground", "ground.at([1, 0])"]))
            if kind == "N":
                return draw(st.sampled_from(["0", "1", "2", "3", "N", "-1", "2.5"]))
            if kind == "V":
                return draw(st.sampled_from(["1", "0", "-1", "0.5", "1e3", names[0]]))
            return fill(draw(st.sampled_from(_EXPRESSIONS)), depth + 1) if depth < 2 else draw(st.sampled_from(names))

        return re.sub(r"\{([ABNVE])\}", one, template)

    lines = text.split("\n")
    lines.insert(1 + _spot(draw, max(len(lines) - 2, 1)), "  " + fill(draw(st.sampled_from(_STATEMENTS))))
    return "\n".join(lines)


_MUTATIONS = [_chars, _tokens, _tokens, _lines, _lines, _names, _names, _words, _words, _words, _statement, _statement, _statement,
              _numbers, _numbers]


@st.composite
def mutants(draw) -> str:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        text = draw(st.sampled_from(_MUTATIONS))(draw, text)
    return text


# ---------------------------------------------------------------- the property
class Hang(Exception):
    """The front end or lowering ran far past any reasonable time."""


@contextlib.contextmanager
def _hard_limit(seconds: int):
    if not hasattr(signal, "SIGALRM"):  # not on Windows: rely on the hypothesis deadline
        yield
        return

    def _raise(signum, frame):
        raise Hang(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def compile_front_end(text: str, formulation: str) -> None:
    """What `pdsl show` does before printing: parse, resolve and lower every model."""
    for model in load_models("fuzz.phm", text=text):
        lower(model, formulation)


def _check_diagnostics(err: PdslError, text: str) -> None:
    assert err.diagnostics
    render(err.diagnostics)  # never crashes
    n_lines = max(len(text.splitlines()), 1)
    for d in err.diagnostics:
        assert re.fullmatch(r"[A-Z][A-Za-z]+", d.code), d.code
        assert d.message and d.message[0] != " "
        if d.span is not None and d.span.path == "fuzz.phm":
            assert 1 <= d.span.line <= n_lines + 1 and d.span.col >= 1, (d, text)


@pytest.fixture(scope="module", autouse=True)
def _warm_up():
    """Lower each seed once, so first-call costs (imports, caches) do not count against the deadline."""
    for seed in SEEDS:
        with contextlib.suppress(PdslError):
            compile_front_end(seed, "hamiltonian")


_EXAMPLES = int(os.environ.get("PDSL_FUZZ_EXAMPLES", "300"))


@settings(
    max_examples=_EXAMPLES,
    deadline=timedelta(seconds=20),
    derandomize="PDSL_FUZZ_EXAMPLES" not in os.environ,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
@given(text=mutants(), formulation=st.sampled_from(["hamiltonian", "lagrangian"]))
@example(  # found by this test: a time-dependent moment of inertia crashed the Cartesian lowering
    text=SECTION_8_GYROSCOPE.replace("moments = [1.0, 1.0, 0.5]", "moments = [1.0, t, 0.5]"), formulation="hamiltonian"
)
@example(text=SECTION_8_GYROSCOPE.replace("mass = m", "mass = 0"), formulation="hamiltonian")  # zero mass crashed it too
@example(text="model A\n  var x\n  der(x) = 10^10^10*x\nend\n", formulation="hamiltonian")  # sympy computed 10^(10^10)
@example(text="model A\n  var x\n  der(x) = (-8)^(1/3)*x\nend\n", formulation="hamiltonian")  # complex numbers reached CasADi
@example(text="model A\n  var x\n  der(x) = " + "-" * 2000 + "x\nend\n", formulation="hamiltonian")  # RecursionError
@example(  # issue 12 defect 1: an overflowing link length reached an SVD (LinAlgError)
    text=(MODELS / "pendulum3.phm").read_text(encoding="utf-8").replace("link ground, b[1], length = l[1]", "link ground, b[1], length = 1e308"),
    formulation="hamiltonian",
)
@example(  # issue 12 defect 2: a denormal mass reached an eigenvalue computation (LinAlgError)
    text=(MODELS / "pendulum3.phm").read_text(encoding="utf-8").replace("mass = m[i]", "mass = 1e-320"), formulation="hamiltonian"
)
@example(  # found by the 30-minute campaign (benchmarks/results_fuzz.md): an empty array in a vector context
    text=(Path(__file__).resolve().parent / "fuzz_regression_empty_array.phm").read_text(encoding="utf-8"),
    formulation='hamiltonian',
)
@example(  # found by the composition seeds: a huge exponent on a store's state hung sympy's polynomial passes
    text="model A\n  param J = 0.02\n  port flange: rotational\n  flow_store wheel(L) energy L^1e308/(2*J)\n"
         "  junction common_effort(wheel, -flange)\nend\n",
    formulation="hamiltonian",
)
@example(  # found by the composition seeds: an instance array whose model fails left an empty array behind
    text=_inline("a2_ladder.phm", "sections.phm").replace("port inp: electrical", "port inp: lectrical"),
    formulation="hamiltonian",
)
@example(  # found by the composition seeds: factoring a 309-digit coefficient (1e308 is kept exact) ran for minutes
    text=(COMP / "analogies.phm").read_text(encoding="utf-8").replace("L^2/(2*J)", "L^2/(1e308*J)"),
    formulation="hamiltonian",
)
@example(  # found by the composition seeds: a kinematic port used as a number reached sympy (AttributeError)
    text=(COMP / "gear.phm").read_text(encoding="utf-8").replace("  connect a1, a2\n", "  lagrangian a1^2/2\n  connect a1, a2\n"),
    formulation="hamiltonian",
)
def test_mutated_models_fail_only_with_located_pdsl_errors(text, formulation):
    with _hard_limit(60):
        try:
            compile_front_end(text, formulation)
        except PdslError as err:
            _check_diagnostics(err, text)


@pytest.mark.parametrize("seed", SEEDS, ids=[re.search(r"^model (\w+)", s, re.M).group(1) for s in SEEDS])
def test_seeds_are_valid(seed):
    models = load_models("seed.phm", text=seed)
    several = seed in COMPOSED or seed in STD_SEEDS
    assert len(models) == (len(re.findall(r"^model ", seed, re.M)) if several else 1)
    for model in models:
        lower(model, "hamiltonian")
