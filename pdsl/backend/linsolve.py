"""A symbolic linear solve that keeps the block-triangular structure: A·w = b for an SX matrix A.

CasADi's ``solve(A, b)`` for SX permutes A to block-triangular form (Dulmage–Mendelsohn) and, when every diagonal
block is 1×1, substitutes; but when a single block is larger it QR-factorises the *whole* permuted matrix
(Gram–Schmidt on all n columns), an expression graph that grows like n³ whatever the blocks. The lowering builds
its linear-implicit rows to be triangular (the Cartesian constraint rows are pre-solved by a symbolic LDLᵀ), and
one kinematic tie makes a 3×3 block: the slider-crank whose block is held on its rail by a port tied to
``std:translational``'s ``Fixed`` (77 unknowns, 351 entries) went from 1,383 instructions to 481,358, its
Jacobian (CVODES' Newton matrix) to 19,382,300 (issue 30).

:func:`solve` drops the explicit zeros (the A that ``to_casadi`` converts is dense, its zeros stored as entries,
so CasADi sees one 77×77 block) and substitutes block by block and factorises only the diagonal blocks (each with CasADi's
``solve``: QR of that block). A matrix that is triangular after the permutation, or structurally singular, goes to
``ca.solve`` unchanged: the same graph as before, so the trajectories of such models do not move by a bit.
"""

from __future__ import annotations

import casadi as ca

__all__ = ["solve", "largest_block"]

_ca_solve = ca.solve  # CasADi's own (a caller may route ca.solve here)


def largest_block(sparsity: ca.Sparsity) -> int:
    """The size of the largest diagonal block of the block-triangular form (1: triangular after permutation)."""
    nb, rowperm, colperm, rowblock, colblock, _, _ = sparsity.btf()
    return max((rowblock[k + 1] - rowblock[k] for k in range(nb)), default=0)


def solve(A: ca.SX, b: ca.SX) -> ca.SX:
    """w with A·w = b (A square SX, b a column or matrix): block substitution on the block-triangular form."""
    n = A.size1()
    if A.size2() != n or n == 0:
        return _ca_solve(A, b)
    full = A
    A = ca.sparsify(A)  # the lowering's A comes dense, its zeros as entries: the structure is that of the nonzeros
    sp = A.sparsity()
    nb, rowperm, colperm, rowblock, colblock, _, _ = sp.btf()
    sizes = [(rowblock[k + 1] - rowblock[k], colblock[k + 1] - colblock[k]) for k in range(nb)]
    if all(r == c == 1 for r, c in sizes) or any(r != c for r, c in sizes):
        return _ca_solve(full, b)  # triangular (CasADi substitutes), or structurally singular (CasADi says so)
    # entries of A by row: row -> [(column, entry)]
    colind, row = sp.colind(), sp.row()
    entries: list[list[tuple[int, ca.SX]]] = [[] for _ in range(n)]
    nz = A.nonzeros()
    for j in range(n):
        for k in range(colind[j], colind[j + 1]):
            entries[row[k]].append((j, nz[k]))
    m = b.size2()
    w: list[list] = [[None] * m for _ in range(n)]  # w[column][rhs column]
    for k in range(nb):  # CasADi's btf: A[rowperm, colperm] is lower block triangular, the first block first
        rows = rowperm[rowblock[k]:rowblock[k + 1]]
        cols = colperm[colblock[k]:colblock[k + 1]]
        inside = set(cols)
        rhs = []
        for r in rows:
            known = [(j, a) for j, a in entries[r] if j not in inside]
            rhs.append([b[r, c] - sum((a * w[j][c] for j, a in known), ca.SX(0)) if known else b[r, c]
                        for c in range(m)])
        if len(rows) == 1:
            a = next(a for j, a in entries[rows[0]] if j == cols[0])
            w[cols[0]] = [rhs[0][c] / a for c in range(m)]
            continue
        block = ca.SX(len(rows), len(cols))
        for i, r in enumerate(rows):
            for j, a in entries[r]:
                if j in inside:
                    block[i, cols.index(j)] = a
        sol = _ca_solve(block, ca.vertcat(*[ca.horzcat(*line) for line in rhs]))
        for i, j in enumerate(cols):
            w[j] = [sol[i, c] for c in range(m)]
    return ca.vertcat(*[ca.horzcat(*line) for line in w])
