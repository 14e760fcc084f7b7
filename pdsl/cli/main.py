"""The ``pdsl`` command: the parser, the dispatch to one module per command (``pdsl/cli/<command>_cmd.py``, which
share ``pdsl/cli/common.py``), and the one error boundary of the process.

Exit codes: 0 ok, 2 user error (a model, data or option problem, reported as
located diagnostics), 1 internal error (``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from contextlib import contextmanager

from ..diagnostics import Diagnostic, PdslError, render
from ..options import finite_float, integer
from .common import (DEFAULT_INTERVALS, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USER, add_common,
                     use_color)


def _shows_default(action) -> bool:
    """An option whose default is worth printing: set, not a flag's False, not an empty list (0 is shown)."""
    d = action.default
    return bool(action.option_strings) and not (d is None or d is False or d == [] or d == argparse.SUPPRESS)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help that shows every default that is set (not None, False or empty)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "%(default)" in text or not _shows_default(action):
            return text
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"

    def _format_action(self, action):  # an option without help text still shows its default
        if action.help is None and _shows_default(action):
            action.help = ""
        return super()._format_action(action)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):  # argparse's own errors become pdsl diagnostics
        raise PdslError(Diagnostic("BadOption", message, hint=f"see `{self.prog} --help`"))


def build_parser() -> argparse.ArgumentParser:
    from .choices import FORMULATIONS, INTEGRATORS, STABILIZERS, TARGETS

    ap = _Parser(prog="pdsl", description="Declarative physical models: check, show, simulate, compile, fit, "
                 "evaluate, sweep, linearize. `pdsl COMMAND --help` describes a command.",
                 epilog="exit codes: 0 ok, 2 user error (model, data or option), 1 internal error")
    ap.add_argument("--debug", action="store_true", help="show Python tracebacks for internal errors")
    ap.add_argument("-V", "--version", action="store_true", help="print the version and exit")
    ap.add_argument("-q", "--quiet", dest="summary_quiet", action="store_true", help="no summary on standard output and no progress bars (errors still go to standard error)")
    ap.add_argument("-v", "--verbose", action="count", default=0,
                    help="more output: the elapsed time on standard error; -vv also tracebacks of internal errors and what "
                         "the numerical solvers (CasADi, SUNDIALS, IPOPT) print")
    sub = ap.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    formulations = FORMULATIONS

    p = sub.add_parser("check", help="parse, resolve and check model files")
    add_common(p, model=False, many=True)

    p = sub.add_parser("show", help="show states, parameters and the derived equations")
    add_common(p)
    p.add_argument("--format", choices=["text", "markdown", "latex"], default="text", help="how equations are printed")
    p.add_argument("--formulation", choices=formulations, default="hamiltonian", help="Cartesian mechanics: Eq. 6 or Eq. 7")
    p.add_argument("--raw", action="store_true", help="print equations as derived, without simplifying them for display")
    p.add_argument("--plot-structure", metavar="OUT.png", help="draw the bodies and their links/joints at the initial state")
    p.add_argument("--power", action="store_true", help="port-Hamiltonian models: the power balance dH/dt = supplied − dissipated")

    p = sub.add_parser("simulate", help="integrate a model and write a CSV (and a plot)")
    add_common(p)
    p.add_argument("--t-end", type=finite_float, required=True, help="final time")
    p.add_argument("--dt", type=finite_float, default=None,
                   help=f"output sampling interval (default: --t-end/{DEFAULT_INTERVALS}, i.e. {DEFAULT_INTERVALS + 1} samples)")
    p.add_argument("--init", action="append", default=[], metavar="NAME=VALUE", help="initial value of a state")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="parameter value")
    p.add_argument("--input", action="append", default=[], metavar="NAME=EXPR", help='exogenous input, e.g. "F=sin(t)"')
    p.add_argument("--input-data", metavar="CSV", help="CSV with a t column and one column per exogenous input")
    p.add_argument("--rtol", type=finite_float, default=1e-8, help="relative tolerance (cvodes, idas, dop853)")
    p.add_argument("--atol", type=finite_float, default=None, help="absolute tolerance (default rtol/100)")
    p.add_argument("--integrator", default="auto", choices=INTEGRATORS,
                   help="auto (default: DOP853 with a stiffness test that hands over to CVODES BDF; IDAS for DAEs; "
                        "CVODES for models with events or switch times), cvodes (Adams), cvodes-bdf (stiff), idas (DAEs), "
                        "dop853 (explicit 8th order, compiled C: small non-stiff ODEs), or fixed-step rk4, euler, "
                        "midpoint, gauss2")
    p.add_argument("--substeps", type=integer, default=1, help="fixed-step schemes: steps per output interval")
    p.add_argument("--max-events", type=integer, default=None, metavar="N",
                   help="models with `when`: more than N events (default 10,000) is an accumulation (Zeno): the run "
                        "stops with an error, the table written up to there")
    p.add_argument("--switches", default="locate", choices=("locate", "step-through"),
                   help="switching surfaces on the state (`if` on states, sign): locate them like events, mode by "
                        "mode, sliding on attractive ones (Filippov; default), or step through them under the error "
                        "control")
    p.add_argument("--event-rows", default="none", choices=("none", "after", "both"),
                   help="models with `when`: add rows at the event instants (the value after, or before and after: a "
                        "repeated t); the events themselves always go to OUT.events.csv")
    p.add_argument("--compile", default="auto", choices=("auto", "yes", "no"),
                   help="cvodes/idas: evaluate the right-hand side as compiled C (built once with the C compiler, "
                        "cached) or in CasADi's VM; auto: the built library when there is one, else C when the "
                        "predicted saving exceeds the build time (docs/simulate.md)")
    p.add_argument("--stabilize", default="none", choices=STABILIZERS,
                   help="constraint drift control: none | project (after every output step) | baumgarte "
                        "(Φ̈ + 2αΦ̇ + β²Φ = 0 in the constraint rows; Cartesian models)")
    p.add_argument("--baumgarte-alpha", type=finite_float, default=None, metavar="A",
                   help="Baumgarte damping α (default: 3 × the fastest rate of the motion at the start)")
    p.add_argument("--baumgarte-beta", type=finite_float, default=None, metavar="B",
                   help="Baumgarte stiffness β (default: equal to α, critical damping)")
    p.add_argument("--no-project", action="store_true", help="do not project the initial state onto the constraints")
    p.add_argument("--random-init", type=integer, metavar="N",
                   help="simulate N random initial states, drawn by the sampling statements (--sample, --sample-file, "
                        "or FILE.sample beside the model), else perturbed by --random-scale; each projected onto the constraints")
    p.add_argument("--init-data", metavar="CSV",
                   help="simulate one trajectory per row of a CSV of initial states (columns: states or shown names "
                        "such as b.x, b.vx, der(q); missing ones take the model's start and --init); each projected")
    p.add_argument("--random-scale", type=finite_float, default=None,
                   help="generic draws: standard deviation of the perturbation of every state (default 0.2)")
    p.add_argument("--sample", action="append", default=[], metavar="STATEMENT",
                   help='a sampling statement, e.g. "q = uniform(-pi/2, pi/2)" or "b.x = l*sin(q)" (docs/simulate.md)')
    p.add_argument("--sample-file", metavar="FILE", help="sampling statements, one per line")
    p.add_argument("--seed", type=integer, default=0, help="seed of --random-init")
    p.add_argument("--threads", type=integer, default=2, help="threads for --random-init")
    p.add_argument("--formulation", choices=formulations, default="hamiltonian", help="Cartesian mechanics: Eq. 6 or Eq. 7")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="trajectory table; the format by extension: .csv, .parquet, .h5, .mat (docs/interop.md); "
                        "- writes CSV to standard output (the summary then goes to standard error); not needed with "
                        "--plot or --animate alone")
    p.add_argument("--columns", metavar="NAMES",
                   help="comma-separated columns to write, in this order (t, and traj with --random-init, are kept)")
    p.add_argument("--noise", type=finite_float, metavar="SIGMA",
                   help="add Gaussian noise SIGMA·N(0, 1) to every written column but t and traj (seeded by --noise-seed)")
    p.add_argument("--noise-seed", type=integer, default=None, help="seed of --noise (default: --seed)")
    p.add_argument("--noise-spare-t0", action="store_true", help="--noise: leave each trajectory's first sample exact")
    p.add_argument("--params", metavar="params.json",
                   help="parameter values and network weights of a fit (`pdsl fit` writes params.json and networks.npz)")
    p.add_argument("--plot", metavar="OUT.png", help="plot every state against time")
    p.add_argument("--animate", metavar="OUT.gif|OUT.html",
                   help="animate the model's picture (bodies, `draw point`/`draw line`) as a GIF or an HTML page")
    p.add_argument("--power", action="store_true",
                   help="port-Hamiltonian models: add columns H and the power e·f of every element port")

    p = sub.add_parser("compile", help="write the model's numerical code: CasADi files, C, or numpy")
    add_common(p)
    p.add_argument("--target", default="casadi", choices=TARGETS,
                   help="CasADi files, C sources (+ a shared library), a numpy module, or an FMI 2.0 FMU (ME + CS)")
    p.add_argument("--params", metavar="params.json",
                   help="fitted values (written by `pdsl fit`) baked in as the parameter defaults")
    p.add_argument("--formulation", choices=formulations, default="hamiltonian", help="Cartesian mechanics: Eq. 6 or Eq. 7")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="output directory (FILE.fmu for --target fmu)")
    p.add_argument("--t-end", type=finite_float, metavar="T",
                   help="--target fmu: the default experiment's stop time (default 10 s)")
    p.add_argument("--dt", type=finite_float, metavar="DT", help="--target fmu: its output step (default T/1000)")

    from . import fit_cmd

    fit_cmd.add_parsers(sub, add_common)
    from . import sweep_cmd

    sweep_cmd.add_parser(sub, add_common)
    from . import linearize_cmd

    linearize_cmd.add_parser(sub, add_common)
    p = sub.add_parser("completion", help="print a shell completion script (bash, zsh or fish)")
    p.add_argument("shell", choices=("bash", "zsh", "fish"), help="eval \"$(pdsl completion bash)\" in ~/.bashrc")
    for action in sub._choices_actions:  # `pdsl COMMAND --help` starts with what `pdsl --help` says of it
        parser = sub.choices[action.dest]
        if parser.description is None:
            parser.description = action.help
    for parser in set(sub.choices.values()):
        _global_flags_after(parser)
    return ap


def _global_flags_after(p: argparse.ArgumentParser) -> None:
    """The global flags also after the command (`pdsl simulate m.phm -v ...`): absent there, they leave the value
    given before it (SUPPRESS); -v after the command adds to the count before it (_main). A flag the command
    already defines (fit's own --quiet: no progress bar) stays the command's."""
    taken = set(p._option_string_actions)
    if "--debug" not in taken:
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="as before the command")
    quiet = [f for f in ("-q", "--quiet") if f not in taken]
    if quiet:
        p.add_argument(*quiet, dest="summary_quiet", action="store_true", default=argparse.SUPPRESS,
                       help="as before the command")
    verbose = [f for f in ("-v", "--verbose") if f not in taken]
    if verbose:
        p.add_argument(*verbose, dest="verbose_after", action="count", default=argparse.SUPPRESS,
                       help="as before the command")


# One module per command, imported when its command runs (``pdsl check`` loads none of simulate's code); each
# imports pdsl.cli.common, never this module.
def cmd_check(args) -> int:
    from . import check_cmd

    return check_cmd.cmd_check(args)


def cmd_show(args) -> int:
    from . import show_cmd

    return show_cmd.cmd_show(args)


def cmd_simulate(args) -> int:
    from . import simulate_cmd

    return simulate_cmd.cmd_simulate(args)


def cmd_compile(args) -> int:
    from . import compile_cmd

    return compile_cmd.cmd_compile(args)


def cmd_fit(args) -> int:
    from . import fit_cmd

    return fit_cmd.cmd_fit(args)


def cmd_evaluate(args) -> int:
    from . import fit_cmd

    return fit_cmd.cmd_evaluate(args)


def cmd_sweep(args) -> int:
    from . import sweep_cmd

    return sweep_cmd.cmd_sweep(args)


def cmd_linearize(args) -> int:
    from . import linearize_cmd

    return linearize_cmd.cmd_linearize(args)


def cmd_completion(args) -> int:
    from .completion import script

    sys.stdout.write(script(build_parser(), args.shell))
    return EXIT_OK


COMMANDS = {
    "check": cmd_check, "show": cmd_show, "simulate": cmd_simulate, "compile": cmd_compile,
    "fit": cmd_fit, "evaluate": cmd_evaluate, "sweep": cmd_sweep, "linearize": cmd_linearize,
    "completion": cmd_completion,
}


def _run_command(args) -> int:
    """Run the command; -q drops the summary, ``-o -`` sends it to standard error (the data owns standard output)."""
    import contextlib
    import os
    import time

    if getattr(args, "output", None) == "-" and args.command != "simulate":
        raise PdslError.at("BadOption", f"-o -: `pdsl {args.command}` writes files into a directory, not to standard output",
                           hint="`-o -` (CSV on standard output) is for `pdsl simulate`")
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        store = _model_cache(args)
        stack.enter_context(_cache_scope(store))
        if getattr(args, "output", None) == "-" and args.command == "simulate":
            from ..data.formats import summary_to_stderr  # only here: every other command runs without pdsl.data

            stack.enter_context(summary_to_stderr())
        if args.summary_quiet:
            null = stack.enter_context(open(os.devnull, "w", encoding="utf-8"))
            stack.enter_context(contextlib.redirect_stdout(null))
        code = COMMANDS[args.command](args)
    if args.verbose:
        cached = f" (compiled-model cache: {store.last})" if store is not None and store.last else ""
        print(f"pdsl {args.command}: {time.perf_counter() - start:.3f} s{cached}", file=sys.stderr)
    return code


def _model_cache(args):
    """The compiled-model cache of this run (pdsl.cache), or None with --no-cache / PDSL_NO_CACHE."""
    import os

    if getattr(args, "no_cache", False) or os.environ.get("PDSL_NO_CACHE", "").strip() not in ("", "0"):
        return None
    from ..cache import ModelCache

    return ModelCache()


def _cache_scope(store):
    from ..cache import using

    return using(store)


class _Sigint:
    """Ctrl-C while a command runs. The handler remembers it, then raises ``KeyboardInterrupt`` as Python's
    own does; libraries that catch that on the way cannot hide it — CasADi turns it, raised in a CVODES
    right-hand side or an IPOPT callback, into a ``RuntimeError`` that pdsl would report as an
    IntegratorFailure (exit 2) or an internal error (exit 1). :func:`main` reports any error that follows a
    Ctrl-C as the interruption it is: one line ``interrupted``, exit 130."""

    seen = False

    @classmethod
    def handler(cls, signum, frame):
        cls.seen = True
        raise KeyboardInterrupt

    @classmethod
    @contextmanager
    def watching(cls):
        """The handler for the duration of a command; the previous one afterwards. Nothing changes outside
        the main thread, nor where SIGINT is ignored (a background job) or handled by someone else."""
        import signal
        import threading

        cls.seen = False
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.getsignal(signal.SIGINT)
        if previous is not signal.default_int_handler:
            yield
            return
        signal.signal(signal.SIGINT, cls.handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)


def _interrupted() -> int:
    """The end of an interrupted command: further Ctrl-C ignored while this line is written."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is _Sigint.handler:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # restored by _Sigint.watching
    try:
        print("interrupted", file=sys.stderr)
    except (OSError, ValueError):
        pass
    return EXIT_INTERRUPTED


def main(argv: list[str] | None = None) -> int:
    """The command of ``argv``; its exit code (0 ok, 2 user error, 1 internal error, 130 interrupted)."""
    try:
        with _Sigint.watching():
            try:
                return _main(argv)
            except KeyboardInterrupt:
                return _interrupted()
    except KeyboardInterrupt:  # a second Ctrl-C before the handler was in place or put back
        return EXIT_INTERRUPTED


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or "-vv" in argv or argv.count("-v") + argv.count("--verbose") >= 2
    try:
        args = build_parser().parse_args(argv)
        args.verbose += getattr(args, "verbose_after", 0)  # -v before and after the command add up
        if args.version:
            from .. import __version__

            print(f"pdsl {__version__}")
            return EXIT_OK
        if args.command is None:
            build_parser().print_help()
            return EXIT_USER
        from .. import quiet  # standard library only

        quiet.set_passthrough(args.verbose >= 2)  # -vv: what CasADi, SUNDIALS and IPOPT print reaches the terminal
        quiet.take_note()  # the note of this command only
        from .startup import defer_sympy_tensor

        defer_sympy_tensor()  # ~30 ms of sympy.combinatorics no model needs (pdsl.cli.startup)
        code = _run_command(args)
        _solver_note()
        return code
    except PdslError as err:
        if _Sigint.seen:  # a Ctrl-C that a solver turned into a failure (CVODES: "rhs failed: KeyboardInterrupt")
            return _interrupted()
        print(render(err.diagnostics, color=use_color()), file=sys.stderr)
        _solver_note()
        return EXIT_USER
    except KeyboardInterrupt:
        return _interrupted()
    except BrokenPipeError:  # output piped into `head` and the like
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception:  # noqa: BLE001 - the one place internal errors are reported
        if _Sigint.seen:  # a Ctrl-C that a library turned into another exception
            return _interrupted()
        if debug:
            traceback.print_exc()
        else:
            exc = sys.exc_info()[1]
            print(f"internal error: {type(exc).__name__}: {exc}\n(this is a bug in pdsl; run with --debug for the traceback)", file=sys.stderr)
        _solver_note()
        return EXIT_INTERNAL


def _solver_note() -> None:
    """Once per command, after its result or its error: how many lines the numerical solvers printed while pdsl
    kept them off the terminal (pdsl.quiet), with the first and the last."""
    quiet = sys.modules.get("pdsl.quiet")  # not imported: no solver ran
    if quiet is None:
        return
    try:
        text = quiet.take_note()
        if text:
            print(text, file=sys.stderr)
    except (OSError, ValueError):  # standard error closed: nothing to tell
        pass


def entry() -> None:
    """The console script (and ``python -m pdsl``): :func:`main`, then :func:`fast_exit`.

    The cyclic garbage collector runs far less often than Python's default (every 700 net allocations):
    importing sympy and building expressions allocates millions of objects and almost none is garbage, so the
    default spends ~12 % of a short command's time scanning them (as mypy, pdsl sets a high first threshold;
    measured in benchmarks/bench_startup_scale.py)."""
    import gc

    gc.set_threshold(*GC_THRESHOLDS)
    try:
        code = main()
    except KeyboardInterrupt:  # between main's return and its caller: nothing is left to do
        code = EXIT_INTERRUPTED
    fast_exit(code)


GC_THRESHOLDS = (100_000, 20, 20)


def fast_exit(code: int) -> None:
    """End the process with ``code`` without the interpreter's teardown.

    Finalising the modules of sympy, numpy and CasADi and freeing their objects takes 0.1–0.2 s of a
    0.5 s command (measured on `pdsl simulate`), and nothing of it is needed once :func:`main` has
    returned. What a normal exit does that matters is done here first: the standard streams are
    flushed and the ``atexit`` handlers run (logging, temporary directories, ray). Files pdsl writes
    are closed before they are renamed into place (:mod:`pdsl.data.csvio`), so none is half-written.
    While a non-daemon thread is still alive the normal exit runs, which waits for it."""
    import os
    import threading

    import signal

    late = []  # a Ctrl-C during this teardown is remembered, not raised into it (a traceback); a second one ends it

    def on_sigint(signum, frame):
        if late:
            os._exit(EXIT_INTERRUPTED)
        late.append(signum)

    if signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, None):
        signal.signal(signal.SIGINT, on_sigint)
    main_thread = threading.main_thread()
    if any(t is not main_thread and t.is_alive() and not t.daemon for t in threading.enumerate()):
        sys.exit(code)
    import atexit

    atexit._run_exitfuncs()
    if late and code != EXIT_INTERRUPTED:
        code = _interrupted()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BrokenPipeError:  # output piped into `head` and the like: what was read is all that is wanted
            pass
        except (OSError, ValueError):
            code = code or EXIT_INTERNAL
    os._exit(code)
