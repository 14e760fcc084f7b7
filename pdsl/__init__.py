"""pdsl — a declarative modeling language for physical systems.

Write a ``.phm`` model; pdsl derives its equations (sympy), shows them, turns
them into CasADi functions and integrators, and fits parameters to data.
"""

from .diagnostics import PdslError, Span
from .pipeline import Compiled, compile_model, load_models, select_model

__version__ = "0.1.0"
__all__ = ["PdslError", "Span", "Compiled", "compile_model", "load_models", "select_model", "__version__"]
