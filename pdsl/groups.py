"""The Lie groups a model may name with ``group`` (LANGUAGE.md §5): their generator fields and body velocities.

A group acts on some of a model's coordinates ``g``. For each group we give the generator fields
``u_a(g) = Σ_j U[j, a] ∂/∂g^j`` (the columns of ``U``) and the body velocity ``ξ = U(g)⁻¹ ġ``, so that
``ġ = Σ_a ξ^a u_a(g)``. The structure constants are not tabulated: the Hamel lowering computes every
bracket from the fields (BENCHMARKS D1, Eq. 39), so a table could not disagree with the fields.

**Invariance convention.** The fields are the infinitesimal generators of *left* translation, i.e.
right-invariant vector fields — the formulas of the rolling-disk paper's Eqs. 20–22 (BENCHMARKS D4.1
notes that the paper calls them left-invariant). For SE(2) with ``g = (φ, x, y)``::

    u1 = ∂φ − y ∂x + x ∂y,   u2 = ∂x,   u3 = ∂y,
    ξ = (φ̇, ẋ + y φ̇, ẏ − x φ̇),
    [u1, u2] = −u3,  [u1, u3] = u2,  [u2, u3] = 0.

``SE2body(φ, x, y)`` is the same group with the left-invariant fields (ξ the body-frame velocities, as a
knife edge or a car needs them)::

    u1 = ∂φ,   u2 = cos φ ∂x + sin φ ∂y,   u3 = −sin φ ∂x + cos φ ∂y,
    ξ = (φ̇, ẋ cos φ + ẏ sin φ, −ẋ sin φ + ẏ cos φ),
    [u1, u2] = u3,  [u1, u3] = −u2,  [u2, u3] = 0.

Translations ``R(a, b, …)`` and the circle ``S1(a)`` (also spelt ``SO2``) are abelian: ``u_i = ∂/∂a_i``.
"""

from __future__ import annotations

from typing import Callable

import sympy as sp

from .records import record

__all__ = ["GroupKind", "GROUPS", "group_kind"]


@record(kw_only=False, slots=False)
class GroupKind:
    name: str
    arity: int | None  # number of coordinates; None: any number ≥ 1
    fields: Callable[[tuple[sp.Symbol, ...]], sp.Matrix]  # U(g): column a is the generator field u_a
    coframe: Callable[[tuple[sp.Symbol, ...]], sp.Matrix]  # U(g)⁻¹: ξ = U⁻¹ ġ, the body velocity
    describe: str


def _translations(g):
    return sp.eye(len(g))


def _se2(g):
    phi, x, y = g
    return sp.Matrix([[1, 0, 0], [-y, 1, 0], [x, 0, 1]])


def _se2_inv(g):
    phi, x, y = g
    return sp.Matrix([[1, 0, 0], [y, 1, 0], [-x, 0, 1]])


def _se2_body(g):
    phi, x, y = g
    return sp.Matrix([[1, 0, 0], [0, sp.cos(phi), -sp.sin(phi)], [0, sp.sin(phi), sp.cos(phi)]])


def _se2_body_inv(g):
    phi, x, y = g
    return sp.Matrix([[1, 0, 0], [0, sp.cos(phi), sp.sin(phi)], [0, -sp.sin(phi), sp.cos(phi)]])


GROUPS: dict[str, GroupKind] = {
    "R": GroupKind("R", None, _translations, _translations, "translations of the named coordinates (abelian)"),
    "S1": GroupKind("S1", 1, _translations, _translations, "rotations of one angle (abelian)"),
    "SO2": GroupKind("SO2", 1, _translations, _translations, "rotations of one angle (abelian); the same as S1"),
    "SE2": GroupKind("SE2", 3, _se2, _se2_inv, "planar rigid motions (phi, x, y); right-invariant generator fields"),
    "SE2body": GroupKind("SE2body", 3, _se2_body, _se2_body_inv,
                         "planar rigid motions (phi, x, y); left-invariant fields, body velocities"),
}


def group_kind(name: str) -> GroupKind | None:
    return GROUPS.get(name)
