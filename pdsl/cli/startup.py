"""Start-up of a CLI process: work a command would do without needing it, deferred.

sympy's ``Add.flatten`` imports ``sympy.tensor.tensor`` on the first sum it builds (for an ``isinstance`` test
against ``TensExpr``), and that module imports ``sympy.combinatorics``, which builds its polyhedra at import: ~30 ms
of every uncached ``pdsl`` command, for tensors no model has. :func:`defer_sympy_tensor` puts a stand-in module there
whose ``TensExpr``/``TensAdd`` are classes nothing is an instance of — true of every object as long as the real
module was never imported, since only it makes tensors. Any other name asked of the stand-in (``TensorHead``, a
``from sympy.tensor.tensor import …`` of real use) imports the real module, puts it in ``sys.modules`` and copies its
names into the stand-in, so that from then on both answer with the real classes. Only the CLI does this: its process
runs no other code; a library import of pdsl leaves sympy alone.
"""

from __future__ import annotations

import sys
import types

__all__ = ["defer_sympy_tensor"]

NAME = "sympy.tensor.tensor"


def defer_sympy_tensor() -> None:
    if NAME in sys.modules:
        return
    stand_in = types.ModuleType(NAME, "pdsl's stand-in until sympy.tensor.tensor is needed (pdsl.cli.startup)")

    class TensExpr:  # noqa: D401 - never instantiated: no tensor exists before the real module is imported
        """Stand-in: nothing is an instance of it."""

    class TensAdd(TensExpr):
        """Stand-in: nothing is an instance of it."""

    def real(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if sys.modules.get(NAME) is stand_in:
            del sys.modules[NAME]
        import importlib

        module = importlib.import_module(NAME)
        stand_in.__dict__.update({k: v for k, v in module.__dict__.items() if k != "__getattr__"})
        return getattr(module, name)

    stand_in.TensExpr, stand_in.TensAdd = TensExpr, TensAdd
    stand_in.__getattr__ = real
    stand_in.__pdsl_stand_in__ = True
    sys.modules[NAME] = stand_in
