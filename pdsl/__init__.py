"""pdsl — a declarative modeling language for physical systems.

Write a ``.phm`` model; pdsl derives its equations (sympy), shows them, turns them into CasADi
functions and integrators, simulates them, and fits parameters and networks to measured data.

The verbs, from Python (each has a docstring: ``help(pdsl.load)``, ``help(pdsl.Model.fit)``):

* ``pdsl.load(path)`` / ``pdsl.Model.from_text(text)`` — a :class:`~pdsl.api.Model`;
* ``m.show()`` — the derived equations (rendered as LaTeX in Jupyter; ``format="text"``);
* ``m.simulate(t_end, dt, init=..., params=..., inputs=...)`` — a run with ``.to_pandas()``,
  ``.to_numpy()``, ``.plot()`` (a matplotlib Figure), ``.snapshots()``, ``.animate()``;
* ``m.fit(data, free=[...], map=..., inputs=..., noise=...)`` — data as a CSV path, a
  DataFrame or arrays; measured data (renamed columns, irregular samples, unmeasured states);
  standard errors and what the data cannot determine (``.notes``);
* ``m.evaluate(data, params=fit)`` — the rollout metrics of ``pdsl evaluate``;
* ``m.torch_module()`` — the right-hand side as a ``torch.nn.Module``.

Lower level: ``pdsl.compile_model`` (the pipeline), :mod:`pdsl.fit`, :mod:`pdsl.sim.simulate`.
The command line has the same verbs: ``pdsl check|show|simulate|fit|evaluate|compile``.
``import pdsl`` is cheap: sympy, CasADi, torch and matplotlib load on first use.
"""

from .diagnostics import PdslError, Span

__version__ = "0.1.0"
__all__ = ["load", "Model", "PdslError", "Span", "Compiled", "compile_model", "load_models", "select_model", "__version__"]

_LAZY = {
    "load": ("api", "load"),
    "Model": ("api", "Model"),
    "Compiled": ("pipeline", "Compiled"),
    "compile_model": ("pipeline", "compile_model"),
    "load_models": ("pipeline", "load_models"),
    "select_model": ("pipeline", "select_model"),
}


def __getattr__(name: str):
    """Import the API and the pipeline on first use (keeps ``import pdsl`` free of sympy/CasADi)."""
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pdsl' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
