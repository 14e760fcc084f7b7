"""Every `pdsl` command in README.md and docs/*.md runs as written (issue 34), checked in a fast mode.

The commands are read from the documents' fenced blocks: every line of a `bash`/`sh`/`shell` block, the `$ ` lines
of a `console` block, and in an unlabelled or `text` block the lines that start with `pdsl ` or `./run pdsl ` (a
synopsis, with `FILE` or `[--option …]`, is not a command; the other lines are output). Backslash continuations,
`NAME=value` variables (`$M`), pipes, `&&` and here-documents (`cat > hnn.phm <<'END'`) are followed; `./run pdsl`
is `pdsl`. Each document is read on its own, in order, as a new user runs it from a fresh checkout.

The fast mode, per command: the arguments parse with `pdsl`'s own parser (an option that does not exist, a bad
choice, a missing required argument fail); every input file — the model, `--data`, `--params`, `--init-data`,
`--input-data`, `--sample-file`, `--config`, `--members`, `--reference`, fit's `--init` — exists in the checkout or
is written by an earlier command of the same document (`-o`, `--plot`, a fit's or sweep's output directory, a
here-document); `--model` names a model of the file; `--free` and `--param` name parameters of the model. Then
every model file the documents use (here-documents included) goes through `pdsl check`. What the commands compute
is checked by the tests of each command; `test_docs_run_as_written` (marked slow) runs them all for real.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = {"bash", "sh", "shell"}
RUN_AS_TEXT = {"", "text"}  # lines starting with `pdsl ` here are commands (transcripts), the rest output
MODEL_COMMANDS = {"check", "show", "simulate", "compile", "fit", "evaluate", "sweep", "linearize"}
INPUT_OPTIONS = ("data", "params", "init_data", "input_data", "sample_file", "config", "members", "reference")
OUTPUT_DIRECTORIES = {"fit", "sweep", "linearize"}  # -o DIR: the command writes files inside it
SYNOPSIS = re.compile(r"\bFILE\b|\[--")


@dataclass
class Command:
    doc: Path
    line: int  # of the document
    words: list[str]
    heredoc: tuple[str, str] | None = None  # (file, text) of `cat > file <<'END'`
    output: tuple[str, ...] = ()  # the transcript's lines after the command (console and text blocks)

    @property
    def expect_error(self) -> bool:
        """A transcript that shows an error: the command is documented to fail (exit 2)."""
        return any("error[" in line for line in self.output)

    def where(self) -> str:
        name = self.doc.relative_to(ROOT) if self.doc.is_relative_to(ROOT) else self.doc
        return f"{name}:{self.line}: {' '.join(self.words)}"


@dataclass
class Document:
    path: Path
    commands: list[Command] = field(default_factory=list)


def _fences(text: str):
    """(info string, first line number, lines) of every fenced block."""
    lines = text.splitlines()
    k = 0
    while k < len(lines):
        m = re.match(r"^(\s*)(```+|~~~+)\s*([\w+-]*)", lines[k])
        if not m:
            k += 1
            continue
        fence, lang, start = m.group(2), m.group(3).lower(), k + 1
        k += 1
        body = []
        while k < len(lines) and not lines[k].strip().startswith(fence):
            body.append(lines[k])
            k += 1
        k += 1
        yield lang, start + 1, body


def _is_command(raw: str, lang: str) -> bool:
    if lang == "console":
        return raw.startswith("$ ")
    s = raw.strip()
    return (s.startswith("pdsl ") or s.startswith("./run pdsl ") or s.startswith("$ pdsl ")) and not SYNOPSIS.search(s)


def _logical_lines(body: list[str], first: int, lang: str):
    """(line number, text, here-document, transcript) of the script lines of a block, continuations joined."""
    k = 0
    while k < len(body):
        raw = body[k]
        number = first + k
        if lang == "console" or lang in RUN_AS_TEXT:
            if not _is_command(raw, lang):
                k += 1
                continue
            s = raw if lang == "console" else raw.strip()
            raw = s[2:] if s.startswith("$ ") else s
        text = raw
        while text.rstrip().endswith("\\") and k + 1 < len(body):
            k += 1
            text = text.rstrip()[:-1] + " " + body[k].strip()
        heredoc = re.search(r"<<-?\s*'?\"?(\w+)'?\"?", text)
        if heredoc and lang in SHELL:
            end, doc = heredoc.group(1), []
            while k + 1 < len(body) and body[k + 1].strip() != end:
                k += 1
                doc.append(body[k])
            k += 1  # the terminator
            yield number, text, "\n".join(doc) + "\n", ()
        else:
            output = []
            if lang not in SHELL:  # a transcript: the lines up to the next command are its output
                while k + 1 < len(body) and not _is_command(body[k + 1], lang):
                    k += 1
                    output.append(body[k])
            yield number, text, None, tuple(output)
        k += 1


def _split(text: str) -> list[str]:
    """A line's simple commands: split at `&&`, `;` and `|` outside quotes (after a pipe only the first counts)."""
    parts, cur, quote, k = [], "", None, 0
    while k < len(text):
        c = text[k]
        if quote:
            cur += c
            quote = None if c == quote else quote
        elif c in "'\"":
            quote, cur = c, cur + c
        elif c == "#" and (not cur or cur[-1].isspace()):
            break
        elif text.startswith("&&", k) or c == ";":
            parts.append(cur)
            cur = ""
            k += 1 if c == ";" else 2
            continue
        elif c == "|" and not text.startswith("||", k):
            parts.append(cur)
            cur = "\0"  # what follows a pipe reads standard input: not a documented command of its own
        else:
            cur += c
        k += 1
    parts.append(cur)
    return [p for p in parts if p.strip() and not p.startswith("\0")]


def read_document(path: Path) -> Document:
    doc = Document(path)
    env: dict[str, str] = {}  # one shell session per document: a variable set in one block is used in the next
    for lang, first, body in _fences(path.read_text(encoding="utf-8")):
        if not (lang in SHELL or lang == "console" or lang in RUN_AS_TEXT):
            continue
        for number, text, heredoc, output in _logical_lines(body, first, lang):
            for part in _split(text):
                part = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), m.group(0)), part)
                part = re.sub(r"<<-?\s*\S+", "", part) if heredoc is not None else part
                words = shlex.split(part, comments=False)
                if len(words) == 1 and re.fullmatch(r"\w+=\S*", words[0]):
                    name, value = words[0].split("=", 1)
                    env[name] = value
                    continue
                if words[:1] == ["export"] and len(words) == 2 and "=" in words[1]:
                    name, value = words[1].split("=", 1)
                    env[name] = value
                    continue
                target = None
                if heredoc is not None and words[:1] == ["cat"] and ">" in words:
                    target = (words[words.index(">") + 1], heredoc)
                doc.commands.append(Command(path, number, words, target, output))
    return doc


# ---------------------------------------------------------------- the fast check
def _pdsl_argv(words: list[str]) -> list[str] | None:
    if words[:2] == ["./run", "pdsl"]:
        return words[2:]
    if words[:1] == ["pdsl"]:
        return words[1:]
    return None


def _inputs(args) -> list[tuple[str, str]]:
    """(option, path) of the files a command reads."""
    out = []
    command = args.command
    if command in MODEL_COMMANDS:
        for f in getattr(args, "files", None) or [getattr(args, "file", None)]:
            if f:
                out.append(("FILE", f))
    for opt in INPUT_OPTIONS:
        v = getattr(args, opt, None)
        if isinstance(v, str) and v != "-":
            out.append((f"--{opt.replace('_', '-')}", v))
    if command == "fit" and isinstance(getattr(args, "init", None), str):
        out.append(("--init", args.init))
    return out


def _outputs(args) -> list[str]:
    out = []
    for opt in ("output", "plot", "animate", "json", "plot_structure"):
        v = getattr(args, opt, None)
        if isinstance(v, str) and v != "-":
            out.append(v)
            if opt == "output" and args.command == "simulate":  # sidecars of a table
                p = Path(v)
                stem = p.name[: -len(p.suffix)] if p.suffix else p.name
                out += [str(p.with_name(stem + ".units.csv")), str(p.with_name(stem + ".events.csv"))]
    return out


def _produced(path: str, made: set[str], dirs: set[str]) -> bool:
    norm = str(Path(path))
    return norm in made or any(norm == d or norm.startswith(d.rstrip("/") + "/") for d in dirs)


def _check_document(doc: Document, workdir: Path) -> tuple[list[str], set[Path]]:
    """Problems of one document's commands, and the model files they use (here-documents written to workdir)."""
    from pdsl.cli.main import build_parser
    from pdsl.diagnostics import PdslError

    problems, models = [], set()
    made: set[str] = set()
    dirs: set[str] = set()
    written: dict[str, Path] = {}
    for cmd in doc.commands:
        if cmd.heredoc is not None:
            name, text = cmd.heredoc
            dest = workdir / doc.path.stem / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text)
            written[str(Path(name))] = dest
            made.add(str(Path(name)))
            continue
        if cmd.words[:1] in (["python"], ["python3"]) and len(cmd.words) > 1 and cmd.words[1].endswith(".py"):
            if not (ROOT / cmd.words[1]).is_file():
                problems.append(f"{cmd.where()}\n  no such script: {cmd.words[1]}")
            continue
        if cmd.words[:1] == ["mkdir"]:
            continue
        argv = _pdsl_argv(cmd.words)
        if argv is None:
            continue
        try:
            args = build_parser().parse_args(argv)
        except PdslError as err:
            problems.append(f"{cmd.where()}\n  {err.diagnostics[0].message}")
            continue
        except SystemExit:  # --help, --version
            continue
        if args.command is None:
            continue
        if cmd.expect_error:  # a transcript of an error: run it (check and show are quick) and compare
            problems += _documented_error(cmd, argv)
            continue
        for opt, path in _inputs(args):
            if (ROOT / path).exists():
                if opt in ("FILE", "--reference") and path.endswith(".phm"):
                    models.add(ROOT / path)
            elif str(Path(path)) in written:
                models.add(written[str(Path(path))]) if path.endswith(".phm") else None
            elif not _produced(path, made, dirs):
                problems.append(f"{cmd.where()}\n  {opt} {path}: no such file in the checkout, and no earlier command "
                                f"of {doc.path.name} writes it")
        problems += _names(cmd, args, written)
        for out in _outputs(args):
            made.add(str(Path(out)))
        if getattr(args, "output", None) and (args.command in OUTPUT_DIRECTORIES
                                              or (args.command == "compile" and not str(args.output).endswith(".fmu"))):
            dirs.add(str(Path(args.output)))
        track = getattr(args, "track", None)
        if isinstance(track, str) and track.startswith("tensorboard:"):
            dirs.add(track.split(":", 1)[1])
    return problems, models


def _documented_error(cmd: Command, argv: list[str]) -> list[str]:
    """A documented failing `check`/`show`: exit 2 and the documented diagnostic, line for line."""
    import contextlib
    import io

    from pdsl.cli.main import main

    if argv[:1] not in (["check"], ["show"]):
        return [f"{cmd.where()}\n  a documented error is checked for `check` and `show` only"]
    err = io.StringIO()
    with contextlib.chdir(ROOT), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(list(argv))
    shown = [line.rstrip() for line in err.getvalue().splitlines()]
    documented = [line.rstrip() for line in cmd.output if line.strip()]
    if code != 2 or shown[: len(documented)] != documented:
        return [f"{cmd.where()}\n  exit {code}; it prints\n" + "\n".join(shown) + "\n  the document shows\n"
                + "\n".join(documented)]
    return []


def _names(cmd: Command, args, written) -> list[str]:
    """--model, --free and --param against the model file (parsed and resolved, not lowered)."""
    from pdsl.diagnostics import PdslError
    from pdsl.pipeline import load_models, select_model

    path = getattr(args, "file", None)
    if args.command not in MODEL_COMMANDS or not path or not str(path).endswith(".phm"):
        return []
    p = ROOT / path if (ROOT / path).exists() else written.get(str(Path(path)))
    if p is None:
        return []
    try:
        model = select_model(load_models(p), getattr(args, "model", None), str(path))
    except PdslError as err:
        return [f"{cmd.where()}\n  {err.diagnostics[0].code}: {err.diagnostics[0].message}"]
    params = {q.name for q in model.params}
    params |= {re.sub(r"\[\d+\]$", "", n) for n in params}
    wanted = []
    free = getattr(args, "free", None)
    if isinstance(free, str):
        wanted += [n.strip() for n in free.split(",") if n.strip()]
    for item in getattr(args, "param", None) or []:
        wanted.append(item.split("=", 1)[0].strip())
    missing = [n for n in wanted if n not in params]
    return [f"{cmd.where()}\n  no parameter {', '.join(missing)} in {model.name} (parameters: {', '.join(sorted(params))})"] \
        if missing else []


def test_the_documents_have_commands():
    counts = {d.name: len([c for c in read_document(d).commands if _pdsl_argv(c.words)]) for d in DOCUMENTS}
    assert sum(counts.values()) >= 50, counts
    assert counts["README.md"] >= 10 and counts["fit.md"] >= 8 and counts["interop.md"] >= 8


def test_every_documented_command_parses_and_finds_its_files(tmp_path):
    problems, models = [], set()
    for path in DOCUMENTS:
        p, m = _check_document(read_document(path), tmp_path)
        problems += p
        models |= m
    assert not problems, "documented commands that do not run as written:\n" + "\n".join(problems)
    assert len(models) >= 20
    from pdsl.cli.main import main

    assert main(["check", *map(str, sorted(models))]) == 0


# ---------------------------------------------------------------- the reader itself
def test_reader_follows_the_shell(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("""intro

```bash
M=models/spring_pendulum.phm
cat > hnn.phm <<'END'
model HNN
end
END
./run pdsl simulate $M --t-end 3 \\
    --dt 0.03 -o out/a.csv   # a comment
pdsl show $M | head -3 && pdsl check hnn.phm
```

```
pdsl simulate FILE [--model NAME] --t-end T
$ pdsl check models/rlc.phm
models/rlc.phm: ok
pdsl fit models/x.phm --data d.csv
  output
```

```console
$ pdsl check a.phm
a.phm: 1 model
```
""")
    cmds = read_document(doc).commands
    assert [c.words for c in cmds] == [
        ["cat", ">", "hnn.phm"],
        ["./run", "pdsl", "simulate", "models/spring_pendulum.phm", "--t-end", "3", "--dt", "0.03", "-o", "out/a.csv"],
        ["pdsl", "show", "models/spring_pendulum.phm"], ["pdsl", "check", "hnn.phm"],
        ["pdsl", "check", "models/rlc.phm"], ["pdsl", "fit", "models/x.phm", "--data", "d.csv"],
        ["pdsl", "check", "a.phm"],
    ]
    assert cmds[0].heredoc == ("hnn.phm", "model HNN\nend\n") and cmds[1].line == 9
    assert cmds[4].output == ("models/rlc.phm: ok",) and cmds[5].output == ("  output",) and not cmds[4].expect_error


@pytest.mark.parametrize("text, fragment", [
    ("pdsl simulate models/spring_pendulum.phm --t-end 1 --no-such-option 3 -o a.csv", "unrecognized arguments"),
    ("pdsl simulate models/no_such_model.phm --t-end 1 -o a.csv", "no such file"),
    ("pdsl fit models/spring_pendulum.phm --data missing.csv --free m1 -o fit", "--data missing.csv"),
    ("pdsl fit models/spring_pendulum.phm --data a.csv --free mass -o fit", "no parameter mass"),
    ("pdsl evaluate models/spring_pendulum.phm --data a.csv --params fit/params.json", "--params fit/params.json"),
    ("pdsl simulate models/spring_pendulum.phm --t-end 1 --integrator rk5 -o a.csv", "invalid choice"),
])
def test_a_broken_command_is_found(tmp_path, text, fragment):
    doc = tmp_path / "d.md"
    doc.write_text(f"```bash\npdsl simulate models/spring_pendulum.phm --t-end 1 -o a.csv\n{text}\n```\n")
    problems, _ = _check_document(read_document(doc), tmp_path)
    assert len(problems) == 1 and fragment in problems[0], problems


# ---------------------------------------------------------------- for real (slow)
@pytest.mark.slow
@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.name)
def test_docs_run_as_written(path, tmp_path):
    """Every command of the document, in order, in a copy of the checkout's models and examples (minutes)."""
    for name in ("models", "examples", "benchmarks"):
        (tmp_path / name).symlink_to(ROOT / name)
    doc = read_document(path)
    pdsl = shutil.which("pdsl", path=str(Path(sys.executable).parent)) or "pdsl"
    for cmd in doc.commands:
        if cmd.heredoc is not None:
            (tmp_path / cmd.heredoc[0]).write_text(cmd.heredoc[1])
            continue
        argv = _pdsl_argv(cmd.words)
        if argv is None or argv[:1] == ["sweep"] and "ray" in argv or any(a.startswith("--track") for a in argv):
            continue  # optional extras and services
        proc = subprocess.run([pdsl, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=3600)
        assert proc.returncode == (2 if cmd.expect_error else 0), f"{cmd.where()}\n{proc.stderr[-2000:]}"
