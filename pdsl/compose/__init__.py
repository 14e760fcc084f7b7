"""Composition (LANGUAGE.md §9): imports, instances, ports and connections, flattened to one model.

This stage sits between parsing and resolution (:func:`compose`: a parsed file in, a file of flat models
out; :func:`pdsl.pipeline.load_models` calls parse, compose and resolve by name): :func:`load_program` reads a file and everything
it imports (relative paths, the bundled ``std:`` library, ``as`` prefixes, cycles refused);
:func:`flatten` turns a model that uses instances into one model whose names carry the instance
prefix (``upper.bob``, ``s[2].q``), whose point ports are aliases, whose power-port connections are
junctions and whose kinematic-port connections are interface records. Every statement keeps its
span, extended by the chain of ``use`` lines that brought it in (:attr:`pdsl.diagnostics.Span.via`).
"""

from ..parse.queries import uses_composition
from .stage import compose

__all__ = ["Program", "compose", "flatten", "load_program", "std_dir", "uses_composition"]


def __getattr__(name: str):
    """The flattener's names, imported when first asked for: a file without composition never loads it."""
    if name in ("Program", "flatten", "load_program", "std_dir"):
        import importlib

        module = importlib.import_module(f"{__name__}.flatten")
        # importing the submodule bound the package attribute `flatten` to the module: the name means the function
        globals().update(Program=module.Program, flatten=module.flatten, load_program=module.load_program,
                         std_dir=module.std_dir)
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
