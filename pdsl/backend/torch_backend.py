"""SymbolicSystem -> batched torch functions: pdsl's second numeric backend (used for training).

The CasADi backend (:mod:`pdsl.backend.functions`) evaluates one state at a time: a batch of
chunks is a ``Function.map`` of a per-chunk graph, and a network inside the model is a chain of
matrix–*vector* products per sample. For large networks that is far slower than matrix–*matrix*
products over the batch (BLAS), which is what a hand-written torch model does. This module lowers
the SAME symbolic IR (:class:`~pdsl.lower.ir.SymbolicSystem`: the linear-implicit rows
A(x)·w = b(x), the report columns, the outputs) to torch, batched over a leading dimension B:

* every sympy node becomes one torch operation on (B,)-shaped columns (parameters are 0-d
  tensors, numbers Python floats), compiled once into a flat instruction list (a *tape*):
  shared subexpressions are evaluated once, numbers are folded, ``a + (−1)·b`` is a subtraction
  and ``a·b⁻¹`` a division;
* a network call ``V(u1, ..., un)`` stacks its inputs to (B, n) and runs the MLP as matrix–matrix
  products; where the model differentiates the network (∂V/∂q in Hamilton's equations) the
  input Jacobian comes from the same pass by explicit backpropagation (as
  :func:`pdsl.backend.neural.mlp_forward_backward` does for CasADi), and the network with its
  Jacobian is one autograd Function with a hand-written backward (:mod:`pdsl.backend.torch_mlp`),
  so training needs no double backward through recorded operations;
* the linear-implicit rows are solved by substitution in the order the lowering wrote them when
  that order is triangular (the Cartesian lowering's L·D·Lᵀ elimination is), each unknown one
  expression of the ones before; rows left over are solved together by a batched dense solve.

Weights use pdsl's flat layout (per layer W column-major, fan_out × fan_in, then b), so a
parameter vector of the CasADi backend is a parameter vector here, and the two backends agree to
round-off (``tests/fit/test_torch_backend.py``). Float64 on the CPU by default; ``dtype`` and
``device`` choose float32 and/or CUDA. The generated C core is CPU code, generated in double and, for
float32 on the CPU, once more in float (every operation in the batch's precision, as a float32 torch
model; a failed float build falls back to float32 networks around the double core); on a GPU the rhs
runs on the tape.
"""

from __future__ import annotations

import math
import operator
import os
from dataclasses import dataclass
from typing import Callable

import sympy as sp
import torch

from .. import symbols as S
from ..diagnostics import InternalError, PdslError
from ..lower.ir import SymbolicSystem
from ..resolve.model import network_derivative
from .neural import layer_sizes, n_weights
from .torch_mlp import ACT, DACT, mlp_torch

__all__ = ["TorchSystem", "Bound", "DTYPE", "mlp_torch"]

DTYPE = torch.float64


# the activation tables and the network evaluation (value, input Jacobian, hand-written backward): pdsl.backend.torch_mlp
_ACT, _DACT = ACT, DACT


def _layers(nn, w: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(Wᵀ, b) per layer as views of the flat weights: W is stored column-major (fan_out × fan_in),
    so the same numbers read row-major as (fan_in, fan_out) are Wᵀ — no copy. One ``split`` (its backward
    joins the layers' gradients in one pass; a slice per layer would fill and add a gradient of the whole
    vector per layer)."""
    sizes = layer_sizes(nn)
    shapes = [s for fan_in, fan_out in zip(sizes[:-1], sizes[1:]) for s in ((fan_in, fan_out), (fan_out,))]
    parts = torch.split(w, [math.prod(s) for s in shapes])
    views = [part.view(s) for part, s in zip(parts, shapes)]
    return list(zip(views[0::2], views[1::2]))


@dataclass
class Bound:
    """Parameters prepared once per parameter vector: physical parameters as 0-d tensors, and each
    network's layers as views of p (sliced once, so that their gradients are accumulated on the
    views and scattered into p once per backward pass, not once per rhs evaluation)."""

    p: torch.Tensor
    phys: tuple
    layers: dict
    masks: dict | None = None  # network name -> dropout masks per hidden layer (training only)
    p_phys: torch.Tensor | None = None  # p[:n_phys], sliced once (the compiled core's parameter input)


# ---------------------------------------------------------------- the tape
class _NetCall:
    """One evaluation of a network on one input list (outputs and, if used, input Jacobian)."""

    def __init__(self, nn, in_slots):
        self.nn, self.in_slots, self.jacobian = nn, in_slots, False


def _as_tensor(v):
    return v if isinstance(v, torch.Tensor) else torch.tensor(float(v), dtype=DTYPE)


def _column(v, B: int, like: torch.Tensor | None = None) -> torch.Tensor:
    if not isinstance(v, torch.Tensor):
        if like is not None:
            return torch.full((B,), float(v), dtype=like.dtype, device=like.device)
        v = _as_tensor(v)
    return v if v.dim() == 1 and v.shape[0] == B else v.expand(B)


def _stack_columns(values, B: int, like: torch.Tensor | None = None) -> torch.Tensor:
    if not values:
        return torch.zeros(B, 0, dtype=DTYPE if like is None else like.dtype, device=None if like is None else like.device)
    return torch.stack([_column(v, B, like) for v in values], dim=1)


def _where(c, a, b):
    return torch.where(_as_tensor(c).bool() if not isinstance(c, torch.Tensor) else c, _as_tensor(a), _as_tensor(b))


_UNARY: dict[type, Callable] = {
    sp.sin: torch.sin, sp.cos: torch.cos, sp.tan: torch.tan, sp.asin: torch.asin, sp.acos: torch.acos,
    sp.atan: torch.atan, sp.exp: torch.exp, sp.log: torch.log, sp.tanh: torch.tanh, sp.sinh: torch.sinh,
    sp.cosh: torch.cosh, sp.Abs: torch.abs, sp.sign: torch.sign, sp.floor: torch.floor, sp.ceiling: torch.ceil,
}
_BINARY: dict[type, Callable] = {
    sp.atan2: lambda y, x: torch.atan2(_as_tensor(y), _as_tensor(x)),
    sp.Min: lambda a, b: torch.minimum(_as_tensor(a), _as_tensor(b)),
    sp.Max: lambda a, b: torch.maximum(_as_tensor(a), _as_tensor(b)),
}
_REL = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}


class _Tape:
    """sympy expressions -> a list of instructions ``(fn, argument slots, result slot)``.

    Leaves (states, parameters, time, inputs, solved unknowns) are slots filled before the run;
    numbers are constant slots. ``compile`` returns the slot of an expression."""

    def __init__(self, nets: dict):
        self.nets = nets  # sympy function name -> Neural
        self.init: list = []  # slot -> constant value (None for computed slots)
        self.instrs: list[tuple[Callable, tuple[int, ...], int]] = []
        self.memo: dict = {}
        self.leaves: dict[sp.Symbol, int] = {}
        self.calls: dict = {}  # (net name, resolved inputs) -> (_NetCall, result slot)
        self.net_order: list[_NetCall] = []

    # ---- slots
    def _slot(self, value=None) -> int:
        self.init.append(value)
        return len(self.init) - 1

    def leaf(self, symbol: sp.Symbol) -> int:
        s = self._slot()
        self.leaves[symbol] = s
        self.memo[symbol] = s
        return s

    def const(self, value: float) -> int:
        key = ("const", float(value))
        if key not in self.memo:
            self.memo[key] = self._slot(float(value))
        return self.memo[key]

    def emit(self, fn: Callable, args: tuple[int, ...]) -> int:
        out = self._slot()
        self.instrs.append((fn, tuple(args), out))
        return out

    def is_const(self, slot: int) -> bool:
        return self.init[slot] is not None

    # ---- expressions
    def compile(self, e, env: dict | None = None) -> int:
        if not isinstance(e, sp.Basic):
            e = S.as_expr(e)
        if env:
            env = {k: v for k, v in env.items() if k in e.free_symbols}
        if env:
            return self._with_env(e, env)
        hit = self.memo.get(e)
        if hit is not None:
            return hit
        out = self._node(e)
        self.memo[e] = out
        return out

    def _with_env(self, e, env):
        """``e`` under the substitution ``env`` (dummy symbol -> expression) of enclosing Subs nodes."""
        if e.is_Symbol:
            return self.compile(env[e])
        if isinstance(e, sp.core.function.AppliedUndef):
            return self._net_output(e, env)
        if isinstance(e, sp.Derivative):
            return self._derivative(e, env)
        if isinstance(e, sp.Subs):
            return self._subs(e, env)
        if not e.has(sp.Derivative, sp.Subs):
            return self.compile(e.xreplace(env))
        return self._node(e, env)

    def _node(self, e, env=None) -> int:
        if e.is_Symbol:
            if e in self.leaves:
                return self.leaves[e]
            raise InternalError(f"no numeric value is bound to `{e}`")
        if e.is_number and not e.has(sp.core.function.AppliedUndef):
            value = complex(e.evalf())
            if value.imag != 0:
                raise InternalError(f"complex constant `{e}`")
            return self.const(value.real)
        if isinstance(e, sp.core.function.AppliedUndef):
            return self._net_output(e, env)
        if isinstance(e, sp.Derivative):
            return self._derivative(e, env)
        if isinstance(e, sp.Subs):
            return self._subs(e, env)
        c = lambda a: self.compile(a, env)  # noqa: E731
        if e.is_Add:
            return self._add(e, c)
        if e.is_Mul:
            return self._mul(e, c)
        if e.is_Pow:
            return self._pow(e, c)
        if isinstance(e, sp.Piecewise):
            out = None
            for value, cond in reversed(e.args):
                v = c(value)
                if cond == sp.true:
                    out = v
                else:
                    out = self.emit(_where, (c(cond), v, out if out is not None else self.const(float("nan"))))
            return out
        if isinstance(e, sp.Heaviside):
            a = c(e.args[0])
            return self.emit(lambda x: torch.heaviside(_as_tensor(x), torch.tensor(0.5, dtype=_as_tensor(x).dtype,
                                                                                  device=_as_tensor(x).device)), (a,))
        if isinstance(e, sp.core.relational.Relational):
            return self.emit(_REL[e.rel_op], (c(e.lhs), c(e.rhs)))
        if isinstance(e, (sp.And, sp.Or)):
            op = torch.logical_and if isinstance(e, sp.And) else torch.logical_or
            out = c(e.args[0])
            for a in e.args[1:]:
                out = self.emit(lambda x, y, op=op: op(_as_tensor(x), _as_tensor(y)), (out, c(a)))
            return out
        if isinstance(e, sp.Not):
            return self.emit(lambda x: torch.logical_not(_as_tensor(x)), (c(e.args[0]),))
        fn = _UNARY.get(e.func)
        if fn is not None:
            return self.emit(lambda x, fn=fn: fn(_as_tensor(x)), (c(e.args[0]),))
        fn = _BINARY.get(e.func)
        if fn is not None:
            out = c(e.args[0])
            for a in e.args[1:]:
                out = self.emit(fn, (out, c(a)))
            return out
        raise InternalError(f"no torch translation for sympy node `{e.func.__name__}`")

    def _add(self, e, c) -> int:
        plus, minus = [], []
        for a in e.args:
            coeff, rest = a.as_coeff_Mul()
            if coeff.is_number and coeff < 0 and rest != 1:
                minus.append(c(-a))
            else:
                plus.append(c(a))
        consts = [s for s in plus if self.is_const(s)]
        plus = [s for s in plus if not self.is_const(s)]
        if consts:
            total = sum(self.init[s] for s in consts)
            if total != 0 or not plus:
                plus.append(self.const(total))
        if not plus:
            out = self.emit(operator.neg, (minus[0],))
            minus = minus[1:]
        else:
            out = plus[0]
            for s in plus[1:]:
                out = self.emit(operator.add, (out, s))
        for s in minus:
            out = self.emit(operator.sub, (out, s))
        return out

    def _mul(self, e, c) -> int:
        num, den = [], []
        coeff = 1.0
        for a in e.args:
            if a.is_number:
                coeff *= float(a)
            elif a.is_Pow and a.exp.is_number and a.exp.is_negative:
                den.append(c(a.base) if a.exp == -1 else c(sp.Pow(a.base, -a.exp)))
            else:
                num.append(c(a))
        out = None
        for s in num:
            out = s if out is None else self.emit(operator.mul, (out, s))
        if coeff == -1.0 and out is not None:
            out = self.emit(operator.neg, (out,))
        elif coeff != 1.0:
            k = self.const(coeff)
            out = k if out is None else self.emit(operator.mul, (k, out))
        d = None
        for s in den:
            d = s if d is None else self.emit(operator.mul, (d, s))
        if d is not None:
            out = self.emit(operator.truediv, (out if out is not None else self.const(1.0), d))
        return out

    def _pow(self, e, c) -> int:
        base, ex = e.args
        b = c(base)
        if ex.is_Integer:
            k = int(ex)
            if k == 2:
                return self.emit(operator.mul, (b, b))
            if k == -1:
                return self.emit(operator.truediv, (self.const(1.0), b))
            if k < 0:
                return self.emit(operator.truediv, (self.const(1.0), self.compile(sp.Pow(base, -k))))
            return self.emit(lambda x, k=k: x**k, (b,))
        if ex == sp.Rational(1, 2):
            return self.emit(lambda x: torch.sqrt(_as_tensor(x)), (b,))
        if ex == sp.Rational(-1, 2):
            return self.emit(lambda x: torch.rsqrt(_as_tensor(x)), (b,))
        if ex.is_number:
            return self.emit(lambda x, k=float(ex): _as_tensor(x) ** k, (b,))
        return self.emit(lambda x, y: _as_tensor(x) ** y, (b, c(ex)))

    # ---- networks
    def _resolved_args(self, f, env):
        args = f.args[1:]
        return tuple(a.xreplace(env) for a in args) if env else tuple(args)

    def _call(self, f, env) -> tuple[_NetCall, int]:
        name = f.func.__name__
        nn = self.nets.get(name)
        if nn is None:
            raise InternalError(f"neural component `{name}` has no numeric implementation bound")
        args = self._resolved_args(f, env)
        key = (name, args)
        if key not in self.calls:
            call = _NetCall(nn, tuple(self.compile(a) for a in args))
            slot = self.emit(lambda *ins, call=call, B=None: None, call.in_slots)  # replaced in finalize()
            self.calls[key] = (call, slot)
            self.net_order.append(call)
            call.slot = slot
        return self.calls[key]

    def _net_output(self, f, env) -> int:
        call, slot = self._call(f, env)
        k = int(f.args[0])
        key = ("y", slot, k)
        if key not in self.memo:
            self.memo[key] = self.emit(lambda r, k=k: r[0][:, k], (slot,))
        return self.memo[key]

    def _derivative(self, e, env) -> int:
        f, k, idx = network_derivative(e)
        call, slot = self._call(f, env)
        call.jacobian = True
        key = ("J", slot, k, tuple(idx))
        if key not in self.memo:
            self.memo[key] = self.emit(lambda r, k=k, idx=tuple(idx): sum(r[1][:, k, i] for i in idx), (slot,))
        return self.memo[key]

    def _subs(self, e, env) -> int:
        inner, old, new = e.args
        env2 = dict(env or {})
        for o, n in zip(old, new):
            env2[o] = n.xreplace(env) if env else n
        return self.compile(inner, env2)


class _Program:
    """A compiled tape with named leaf slots and output slots; ``run`` evaluates it."""

    def __init__(self, tape: _Tape, outputs: list[int], leaf_slots: dict):
        self.init = list(tape.init)
        self.instrs = list(tape.instrs)
        self.outputs = outputs
        self.leaf_slots = leaf_slots  # kind -> list of slots (None where the leaf is unused)
        self.calls = {call.slot: call for call in tape.net_order}
        self.instrs = [(self._net_fn(self.calls[out]), args, out, True) if out in self.calls else (fn, args, out, False)
                       for fn, args, out in self.instrs]

    @staticmethod
    def _net_fn(call: _NetCall):
        nn, jac = call.nn, call.jacobian

        def run(*ins, _ctx):
            masks = _ctx.masks.get(nn.name) if _ctx.masks else None
            return mlp_torch(nn, _ctx.layers[nn.name], _stack_columns(ins, _ctx.B, _ctx.like), jac, masks=masks)

        return run

    def run(self, ctx, leaves: dict) -> list:
        vals = list(self.init)
        for kind, values in leaves.items():
            for slot, v in zip(self.leaf_slots.get(kind, ()), values):
                if slot is not None:
                    vals[slot] = v
        for fn, args, out, is_net in self.instrs:
            if is_net:
                vals[out] = fn(*[vals[a] for a in args], _ctx=ctx)
            else:
                vals[out] = fn(*[vals[a] for a in args])
        return [vals[s] for s in self.outputs]


@dataclass
class _Ctx:
    B: int
    layers: dict
    like: torch.Tensor | None = None  # dtype and device of the batch
    masks: dict | None = None


# ---------------------------------------------------------------- the system
class TorchSystem:
    """Batched torch evaluation of a symbolic system: ``rhs``, ``report`` (the shown columns),
    ``outputs`` and ``state_from_shown`` (the inverse of an affine report map, e.g. p = M v).

    Shapes: t (B,), x (B, nx), u (B, nu), results (B, ·); ``bound = system.bind(p)`` with p the
    full parameter vector (physical parameters, then network weights: the CasADi layout)."""

    def __init__(self, system: SymbolicSystem, core: str = "auto", dtype: torch.dtype = DTYPE,
                 device: str | torch.device = "cpu"):
        """``core``: ``auto`` (generated C for the symbolic part of the rhs when a C compiler is
        available, :mod:`pdsl.backend.torch_core`; env ``PDSL_TORCH_CORE=tape`` turns it off),
        ``c`` (required), or ``tape`` (torch operations only). ``dtype``/``device``: of the
        tensors this system is evaluated on; the C core is CPU code (double): ``auto`` falls back to
        the tape on a GPU, and in float32 on the CPU the networks run in float32 around it."""
        self.dtype, self.device = dtype, torch.device(device)
        if system.algebraics:
            raise PdslError.at("NotYetSupported", f"{system.name} is a DAE; the torch backend takes ODE models",
                               system.span, "fit it with the CasADi backend (--backend casadi)")
        if system.events and system.invariants:  # as the CasADi fit (pdsl.fit.loss.interval_events)
            raise PdslError.at("NotYetSupported", f"fitting through the event `{system.events[0].label}`: a reset of a "
                               "constrained part is an impulse, which the fit's integrators do not apply yet",
                               system.events[0].span, "simulate it with pdsl simulate; fitting through events takes "
                               "models whose resets set states directly")
        self.system = system
        self.nets = [n for n in system.neural if n.n_in is not None]
        self._net_by_fn = {n.fn.__name__: n for n in self.nets}
        self.n_phys = len(system.params)
        self.n_p = self.n_phys + sum(n_weights(n) for n in self.nets)
        self.x_names = tuple(s.name for s in system.states)
        self.u_names = tuple(u.name for u in system.exogenous_inputs)
        self.y_names = tuple(o.name for o in system.outputs)
        columns = system.report_columns()
        self.report_names = tuple(n for n, _ in columns)
        self.nx = len(system.states)
        laws = system.input_laws()
        self._laws = laws
        core = os.environ.get("PDSL_TORCH_CORE", core) if core == "auto" else core
        if core == "auto" and self.device.type != "cpu":
            core = "tape"
        if core == "c" and self.device.type != "cpu":
            raise PdslError.at("NotYetSupported", f"{system.name}: the compiled core runs on the CPU",
                               system.span, "use core 'auto' or 'tape' on a GPU")
        self._core = None
        if core in ("auto", "c"):
            from .torch_core import build_core

            self._core = build_core(system, self._net_by_fn, laws)
            if self._core is None and core == "c":
                raise PdslError.at("NotYetSupported", f"{system.name}: no compiled core (no C compiler, or networks "
                                   "fed by networks)", system.span)
            if self._core is not None and dtype != torch.float64:
                self._core.supports(dtype)  # its library of this precision built now, with the model, not mid-training
        self._rhs_tape = None
        self._report = self._program([e for _, e in columns])
        self._outputs = self._program([o.expr for o in system.outputs])
        self._shown = self._compile_state_from_shown(columns)
        self._compile_events()

    # ---- compilation
    def _tape(self) -> tuple[_Tape, dict]:
        tape = _Tape(self._net_by_fn)
        sysm = self.system
        leaves = {
            "t": [tape.leaf(S.TIME)],
            "x": [tape.leaf(s.symbol) for s in sysm.states],
            "p": [tape.leaf(q.symbol) for q in sysm.params],
            "u": [tape.leaf(u.symbol) for u in sysm.exogenous_inputs],
        }
        return tape, leaves

    def _sub(self, e):
        e = S.as_expr(e)
        return e.xreplace(self._laws) if self._laws else e

    def _program(self, exprs) -> _Program:
        tape, leaves = self._tape()
        outs = [tape.compile(self._sub(e)) for e in exprs]
        return _Program(tape, outs, leaves)

    def _compile_rhs(self) -> _Program:
        sysm = self.system
        tape, leaves = self._tape()
        if sysm.is_explicit():
            outs = [tape.compile(self._sub(e.rhs)) for e in sysm.differential]
            return _Program(tape, outs, leaves)
        A, b = sysm.linear_system()
        A, b = A.applyfunc(self._sub), b.applyfunc(self._sub)
        unknowns = list(sysm.unknowns)
        slots = _solve_rows(tape, A, b, unknowns)
        return _Program(tape, [slots[w] for w in unknowns[: self.nx]], leaves)

    def _compile_events(self):
        """The events' atoms and resets (:func:`pdsl.backend.hybrid.event_atoms`), compiled as the other programs."""
        from .hybrid import event_atoms

        sysm = self.system
        atoms, strict, conditions = event_atoms(sysm)
        self.event_strict, self.event_conditions = strict, conditions
        self.event_terminate = tuple(bool(ev.terminate) for ev in sysm.events)
        self.event_labels = tuple(ev.label for ev in sysm.events)
        self._atoms = self._program(atoms) if atoms else None
        targets, resets = [], []
        for ev in sysm.events:
            if not ev.resets:
                targets.append(None)
                resets.append(None)
                continue
            missing = [r.target for r in ev.resets if r.target not in self.x_names]
            if missing:
                raise PdslError.at("NotYetSupported", f"fitting through the event `{ev.label}`: `reinit({missing[0]}, …)` "
                                   "sets a column that is not a state", ev.span,
                                   "simulate it with pdsl simulate; fitting through events takes models whose resets "
                                   "set states directly")
            targets.append(tuple(self.x_names.index(r.target) for r in ev.resets))
            resets.append(self._program([r.value for r in ev.resets]))  # reads the state just before the event
        self.event_targets, self._resets = tuple(targets), resets

    @property
    def has_events(self) -> bool:
        return bool(self.event_conditions)

    def event_atoms(self, t, x: torch.Tensor, bound: Bound, u: torch.Tensor | None = None) -> torch.Tensor:
        """The events' atom indicators g (B, n_atoms): atom k true where g_k < 0 (``event_strict[k]``) or ≤ 0."""
        if self._atoms is None:
            return x[:, :0]
        ctx, leaves = self._leaves(t, x, bound, u)
        return _stack_columns(self._atoms.run(ctx, leaves), x.shape[0], x)

    def event_reset(self, j: int, t, x: torch.Tensor, bound: Bound, u: torch.Tensor | None = None) -> torch.Tensor | None:
        """The new values (B, k) of the states ``event_targets[j]`` when event j fires at (t, x) (x: just before);
        None for an event without resets."""
        prog = self._resets[j]
        if prog is None:
            return None
        ctx, leaves = self._leaves(t, x, bound, u)
        return _stack_columns(prog.run(ctx, leaves), x.shape[0], x)

    def _compile_state_from_shown(self, columns):
        """x = J⁻¹ (s − y0) when the shown columns are affine in the state (J = ∂y/∂x free of x)."""
        sysm = self.system
        states = [s.symbol for s in sysm.states]
        if [n for n, _ in columns] == list(self.x_names) and all(e == s for (_, e), s in zip(columns, states)):
            return None
        if len(columns) != self.nx:
            raise PdslError.at("NotYetSupported", f"{sysm.name} shows {len(columns)} columns for {self.nx} states",
                               sysm.span, "fitting needs a one-to-one map from shown columns to states")
        Y = sp.Matrix([self._sub(e) for _, e in columns])
        J = Y.jacobian(states)
        if J.free_symbols & set(states) or any(isinstance(a, sp.Derivative) for a in J.atoms(sp.Derivative)):
            raise PdslError.at("NotYetSupported", f"{sysm.name}: its shown columns are not affine in the state",
                               sysm.span, "fit it with the CasADi backend (--backend casadi)")
        y0 = Y.xreplace({s: 0 for s in states})
        # J x = s − y0 solved on the tape as the rhs's linear rows are (_solve_rows): by substitution while a row
        # has one unknown left (p = M v with a diagonal M: one division per momentum, a position is its column),
        # one batched dense solve for what remains
        tape, leaves = self._tape()
        shown = [sp.Dummy(f"s{i}") for i in range(self.nx)]
        leaves["s"] = [tape.leaf(v) for v in shown]
        unknowns = [sp.Dummy(f"x{i}") for i in range(self.nx)]
        b = sp.Matrix([v - self._sub(c) for v, c in zip(shown, y0)])
        slots = _solve_rows(tape, J.applyfunc(self._sub), b, unknowns)
        return _Program(tape, [slots[w] for w in unknowns], leaves)

    # ---- evaluation
    def bind(self, p: torch.Tensor, masks: dict | None = None) -> Bound:
        """p prepared for evaluation; ``masks`` (network name -> per-hidden-layer (B, width) tensors)
        applies dropout in every network call (:meth:`dropout_masks`)."""
        p = p.reshape(-1)
        if p.shape[0] != self.n_p:
            raise ValueError(f"{self.system.name}: parameter vector of length {p.shape[0]}, expected {self.n_p}")
        sizes = [self.n_phys] + [n_weights(nn) for nn in self.nets]
        parts = torch.split(p, sizes + [p.shape[0] - sum(sizes)]) if self.nets else (p[: self.n_phys],)
        phys = tuple(parts[0].unbind(0)) if self.n_phys else ()
        layers = {nn.name: _layers(nn, w) for nn, w in zip(self.nets, parts[1:])}
        return Bound(p, phys, layers, masks, parts[0])

    def dropout_masks(self, rate, B: int, generator: torch.Generator) -> dict:
        """Inverted-dropout masks for a batch of B: per network, per hidden layer, entries 0 with
        probability ``rate`` and 1/(1 − rate) otherwise (drawn on the CPU from ``generator``). ``rate``:
        one for every network, or (network name, rate) pairs (networks not named: no dropout)."""
        rates = dict(rate) if isinstance(rate, (tuple, list, dict)) else {nn.name: rate for nn in self.nets}
        out = {}
        for nn in self.nets:
            rate = rates.get(nn.name, 0.0)
            if not rate:
                continue
            out[nn.name] = [(torch.bernoulli(torch.full((B, w), 1.0 - rate, dtype=torch.float64), generator=generator)
                             / (1.0 - rate)).to(dtype=self.dtype, device=self.device) for w in nn.hidden]
        return out

    def _leaves(self, t, x, bound: Bound, u):
        B = x.shape[0]
        t = _column(t, B, x)
        leaves = {"t": [t], "x": x.unbind(1), "p": bound.phys}
        if u is not None and u.shape[1]:
            leaves["u"] = u.unbind(1)
        return _Ctx(B, bound.layers, x, bound.masks), leaves

    @property
    def core(self) -> str:
        """How the rhs is evaluated: ``c`` (generated C core + torch networks) or ``tape``."""
        return "c" if self._core is not None else "tape"

    @property
    def _rhs(self) -> "_Program":
        if self._rhs_tape is None:
            self._rhs_tape = self._compile_rhs()
        return self._rhs_tape

    def rhs(self, t, x: torch.Tensor, bound: Bound, u: torch.Tensor | None = None) -> torch.Tensor:
        if self._core is not None:
            dt = x.dtype
            if dt == torch.float64 or self._core.supports(dt):  # float32: the core generated in float
                mlp = mlp_torch
                if bound.masks:
                    def mlp(nn, layers, X, jac, rows=None):
                        return mlp_torch(nn, layers, X, jac, rows, masks=bound.masks.get(nn.name))
                return self._core.rhs(_column(t, x.shape[0], x).to(dt), x, bound, u, mlp)
            # mixed precision (a core without a library in dt): the networks (the matrix products) in the batch's
            # dtype, the compiled scalar glue around them in float64; casts are differentiable
            def mlp(nn, layers, X, jac, rows=None):
                y, J = mlp_torch(nn, layers, X.to(dt), jac, rows, masks=bound.masks.get(nn.name) if bound.masks else None)
                return y.double(), None if J is None else J.double()

            b64 = Bound(bound.p.double(), (), bound.layers, bound.masks)
            t64 = _column(t, x.shape[0], x).double()
            return self._core.rhs(t64, x.double(), b64, None if u is None else u.double(), mlp).to(dt)
        ctx, leaves = self._leaves(t, x, bound, u)
        return _stack_columns(self._rhs.run(ctx, leaves), x.shape[0], x)

    def report(self, t, x: torch.Tensor, bound: Bound) -> torch.Tensor:
        ctx, leaves = self._leaves(t, x, bound, None)
        return _stack_columns(self._report.run(ctx, leaves), x.shape[0], x)

    def outputs(self, t, x: torch.Tensor, bound: Bound, u: torch.Tensor | None = None) -> torch.Tensor:
        ctx, leaves = self._leaves(t, x, bound, u)
        return _stack_columns(self._outputs.run(ctx, leaves), x.shape[0], x)

    def state_from_shown(self, t, s: torch.Tensor, bound: Bound) -> torch.Tensor:
        if self._shown is None:
            return s
        ctx, leaves = self._leaves(t, s[:, :0], bound, None)  # the program reads no state
        leaves["s"] = s.unbind(1)
        return _stack_columns(self._shown.run(ctx, leaves), s.shape[0], s)


def _solve_rows(tape: _Tape, A: sp.Matrix, b: sp.Matrix, unknowns: list) -> dict:
    """Slots of the unknowns w of A·w = b: by substitution while some row has exactly one unknown
    left (a triangular system: the Cartesian lowering's elimination order), then one batched dense
    solve of whatever remains."""
    n = len(unknowns)
    rows_left = list(range(A.shape[0]))
    nz = {r: {j for j in range(n) if A[r, j] != 0} for r in rows_left}
    solved: dict = {}
    progress = True
    while rows_left and progress:
        progress = False
        for r in list(rows_left):
            open_ = [j for j in nz[r] if unknowns[j] not in solved]
            if len(open_) != 1:
                continue
            k = open_[0]
            rest = sum((A[r, j] * unknowns[j] for j in nz[r] if j != k), sp.Integer(0))
            slot_num = tape.compile(b[r] - rest)
            if A[r, k] == 1:
                slot = slot_num
            else:
                slot = tape.emit(operator.truediv, (slot_num, tape.compile(A[r, k])))
            w = unknowns[k]
            tape.memo[w] = slot
            tape.leaves[w] = slot
            solved[w] = slot
            rows_left.remove(r)
            progress = True
    open_unknowns = [w for w in unknowns if w not in solved]
    if open_unknowns:
        if len(rows_left) != len(open_unknowns):
            raise InternalError("linear-implicit rows do not match their unknowns")
        cols = [unknowns.index(w) for w in open_unknowns]
        entries = []
        for r in rows_left:
            rest = sum((A[r, j] * unknowns[j] for j in nz[r] if unknowns[j] in solved), sp.Integer(0))
            entries.append(tape.compile(b[r] - rest))
        for r in rows_left:
            entries.extend(tape.compile(A[r, j]) for j in cols)
        m = len(open_unknowns)

        def dense(*vals, m=m):
            cols = [v for v in vals if isinstance(v, torch.Tensor) and v.dim() == 1]
            B = max([v.shape[0] for v in cols] or [1])
            like = cols[0] if cols else None
            rhs = _stack_columns(vals[:m], B, like)
            M = _stack_columns(vals[m:], B, like).reshape(B, m, m)
            return torch.linalg.solve(M, rhs.unsqueeze(-1)).squeeze(-1)

        sol = tape.emit(dense, tuple(entries))
        for i, w in enumerate(open_unknowns):
            s = tape.emit(lambda r, i=i: r[:, i], (sol,))
            tape.memo[w] = s
            solved[w] = s
    return solved
