"""What the command modules of ``pdsl`` share: exit codes, the arguments every model command takes, the
compile options of a command's arguments, writes whose failures are user errors, colour in diagnostics.

Layering: :mod:`pdsl.cli.main` builds the parser and dispatches to one module per command
(``check_cmd``, ``show_cmd``, ``simulate_cmd``, ``compile_cmd``, ``fit_cmd`` (fit and evaluate), ``sweep_cmd``,
``linearize_cmd``); each command module imports this one and never main nor another command module. Keep this
module cheap to import (standard library, :mod:`pdsl.diagnostics`, :mod:`pdsl.options`): ``pdsl --help`` loads it.
"""

from __future__ import annotations

import argparse
import sys

from ..diagnostics import PdslError
from ..options import integer

__all__ = ["EXIT_OK", "EXIT_INTERNAL", "EXIT_USER", "EXIT_INTERRUPTED", "DEFAULT_INTERVALS", "add_common", "consts",
           "compile_options", "write_guarded", "use_color"]

EXIT_OK, EXIT_INTERNAL, EXIT_USER = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command ended by Ctrl-C

DEFAULT_INTERVALS = 1000  # `simulate` without --dt: this many output intervals over [0, --t-end]


def add_common(p: argparse.ArgumentParser, *, model: bool = True, many: bool = False) -> None:
    """The arguments every model command takes: the file(s), --model, --const, --no-cache."""
    if many:
        p.add_argument("files", nargs="+", metavar="file", help="one or more .phm model files")
    else:
        p.add_argument("file", help="a .phm model file")
    if model:
        p.add_argument("--model", help="which model of the file (needed when it holds several)")
    p.add_argument("--const", action="append", default=[], metavar="NAME=INT", help="override a structural const")
    p.add_argument("--no-cache", action="store_true",
                   help="neither read nor write the compiled-model cache (PDSL_CACHE_DIR; also PDSL_NO_CACHE=1)")


def consts(items: list[str]) -> dict[str, int]:
    """``--const NAME=INT`` items as ``{name: value}``; a value that is not an integer is a BadOption error."""
    from ..options import parse_assignment

    out = {}
    for item in items:
        name, value = parse_assignment(item, "--const")
        try:
            out[name] = integer(value)
        except argparse.ArgumentTypeError:
            raise PdslError.at("BadOption", f"--const {name}={value}: a const is an integer") from None
    return out


def compile_options(args, *, numeric: bool = True, stabilize: str = "none"):
    """The frozen :class:`~pdsl.pipeline.CompileOptions` of a command's arguments."""
    from ..pipeline import CompileOptions

    return CompileOptions(model=getattr(args, "model", None), consts=consts(args.const),
                          formulation=getattr(args, "formulation", "hamiltonian"), stabilize=stabilize, numeric=numeric)


def write_guarded(fn, path):
    """Run ``fn`` (which writes ``path``); an ``OSError`` becomes the located user error CannotWrite (exit 2)."""
    try:
        fn()
    except OSError as exc:
        raise PdslError.at("CannotWrite", f"cannot write {path}: {exc.strerror or exc}") from None


def use_color() -> bool:
    """Colour in diagnostics: on a terminal, unless NO_COLOR is set (pdsl.terminal)."""
    from ..terminal import color

    return color(sys.stderr)
