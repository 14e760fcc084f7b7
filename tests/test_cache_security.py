"""The cache trusts only what this user's pdsl wrote (pdsl.cache): planted pickles and shared objects are never
loaded, a directory others can write (or that another user owns) is refused with one warning, a damaged library
is rebuilt instead of crashing the process, ``--no-cache`` touches nothing, abandoned temporaries are swept."""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pdsl.cache as C
from pdsl.cache import KEY_FILE, ModelCache, temporary_file
from pdsl.pipeline import compile_model

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "models"
WARNING = "warning: the cache directory"
needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="chown to another user needs root")
CC = shutil.which("cc") or shutil.which("gcc")

PENDULUM = """model P
  param g = 9.81, l = 1.3
  coord q = 0.4
  lagrangian der(q)^2/2*l^2 + g*l*cos(q)
end
"""


def _env(cache: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PDSL_NO_CACHE"}
    env.update({"PDSL_CACHE_DIR": str(cache), **extra})
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _pdsl(args, env, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "pdsl", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=300)


def _simulate(src: Path, out: Path, *more) -> list[str]:
    return ["-v", "simulate", str(src), "--t-end", "1", "--dt", "0.1", *more, "-o", str(out)]


class _Marker:
    """Unpickling it creates ``path`` (what a planted pickle could do; a real one would run anything)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _planted_library(tmp: Path, marker: Path) -> bytes:
    """A shared object whose constructor writes ``marker`` when it is loaded (junk bytes without a compiler)."""
    if CC is None:
        return b"\x7fELF" + os.urandom(4000)
    c = tmp / "evil.c"
    c.write_text('#include <stdio.h>\n__attribute__((constructor)) static void evil(void) {\n'
                 f'  FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("loaded", f); fclose(f); }}\n}}\n'
                 "int pdsl_dummy(void) { return 0; }\n")
    so = tmp / "evil.so"
    subprocess.run([CC, "-shared", "-fPIC", "-o", str(so), str(c)], check=True, capture_output=True)
    return so.read_bytes()


@pytest.fixture(scope="module")
def names(tmp_path_factory):
    """The model file and the names its entries get (learnt from a run in a private directory)."""
    tmp = tmp_path_factory.mktemp("names")
    src = tmp / "p.phm"
    src.write_text(PENDULUM)
    good = tmp / "good"
    r = _pdsl(_simulate(src, tmp / "o.csv", "--compile", "yes" if CC else "no"), _env(good))
    assert r.returncode == 0, r.stderr
    entries = sorted(p.name for p in good.iterdir() if p.name.endswith(".pdslc"))
    libs = sorted(p.name for p in good.iterdir() if p.name.startswith("rhs-"))
    assert len(entries) == 1 and len(libs) == (2 if CC else 0)
    reference = tmp / "ref.csv"
    r = _pdsl(_simulate(src, reference, "--no-cache"), _env(good))
    assert r.returncode == 0, r.stderr
    return src, entries[0], libs, reference.read_bytes()


def _plant(d: Path, names, marker: Path, *, forged: bool) -> dict[str, bytes]:
    """The planted files: a pickle and every library name. ``forged``: dressed in pdsl's format with a made-up MAC."""
    _, entry, libs, _ = names
    blob = pickle.dumps(_Marker(marker))
    lib = _planted_library(d.parent, marker)
    files = {entry: (C.ENTRY_MAGIC + os.urandom(32) + blob) if forged else blob}
    for name in libs:
        files[name] = lib + C.LIBRARY_MAGIC + os.urandom(32) if forged else lib
    for name, data in files.items():
        (d / name).write_bytes(data)
    return files


def _snapshot(d: Path) -> dict:
    return {p.name: (p.read_bytes(), p.stat().st_mode, p.stat().st_uid) for p in d.iterdir()}


def _run_planted(tmp_path, names, d: Path, marker: Path):
    src, _, _, reference = names
    out = tmp_path / "o.csv"
    r = _pdsl(_simulate(src, out, "--compile", "yes" if CC else "no"), _env(d))
    assert r.returncode == 0, r.stderr
    assert not marker.exists(), "a planted entry was loaded"
    assert out.read_bytes() == reference  # the command did its work
    return r


@pytest.mark.parametrize("forged", [False, True])
def test_world_writable_directory_is_refused_and_left_alone(tmp_path, names, forged):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o777)
    marker = tmp_path / "marker"
    _plant(d, names, marker, forged=forged)
    (d / KEY_FILE).write_bytes(os.urandom(32))  # the planter's own key: no help either
    os.chmod(d / KEY_FILE, 0o600)
    before = _snapshot(d)
    r = _run_planted(tmp_path, names, d, marker)
    assert r.stderr.count(WARNING) == 1, r.stderr
    assert "writable by group and others (mode 0777)" in r.stderr
    assert _snapshot(d) == before  # nothing read as an entry, written or removed (the evidence stays)


@needs_root
def test_foreign_owned_directory_is_refused_and_left_alone(tmp_path, names):
    d = tmp_path / "theirs"
    d.mkdir(mode=0o755)
    marker = tmp_path / "marker"
    _plant(d, names, marker, forged=True)
    for p in [d, *d.iterdir()]:
        os.chown(p, 65534, 65534)
    before = _snapshot(d)
    r = _run_planted(tmp_path, names, d, marker)
    assert r.stderr.count(WARNING) == 1, r.stderr
    assert "owned by uid 65534" in r.stderr
    assert _snapshot(d) == before


@pytest.mark.parametrize("forged", [False, True])
def test_own_directory_entries_without_a_valid_mac_are_removed_and_rebuilt(tmp_path, names, forged):
    src, entry, libs, reference = names
    d = tmp_path / "mine"
    d.mkdir(mode=0o700)
    marker = tmp_path / "marker"
    planted = _plant(d, names, marker, forged=forged)
    r = _run_planted(tmp_path, names, d, marker)
    assert WARNING not in r.stderr
    replaced = [n for n, data in planted.items() if (d / n).read_bytes() != data]  # by what pdsl built
    assert set(libs) <= set(replaced)
    assert f"{len(replaced)} damaged or unauthenticated entries removed" in r.stderr, r.stderr
    # the planted pickle is untouched only when pdsl's own sources changed since `names` ran (an editable install
    # being edited: the code stamp is in the key), so the entry went under another name
    assert entry in replaced or len(list(d.glob("*.pdslc"))) == 2
    again = _pdsl(_simulate(src, tmp_path / "o2.csv"), _env(d))
    assert again.returncode == 0 and "cache: hit)" in again.stderr, again.stderr
    if CC:
        assert "compiled C (library from the cache)" in again.stdout
    assert (tmp_path / "o2.csv").read_bytes() == reference
    assert not marker.exists()


def test_entry_checks_in_process(tmp_path, monkeypatch, capsys):
    """Owner, mode, links and names are checked per entry; a key file that is not private refuses the directory."""
    monkeypatch.setattr(C, "_WARNED", [False])
    src = tmp_path / "p.phm"
    src.write_text(PENDULUM)
    d = tmp_path / "c"
    store = ModelCache(d)
    compile_model(src, cache=store)
    (entry,) = d.glob("*.pdslc")
    good = entry.read_bytes()
    # a valid entry copied to another key's name does not verify (the MAC covers the name)
    other = d / ("0" * 64 + ".pdslc")
    other.write_bytes(good)
    assert store.load("0" * 64) is None and not other.exists() and store.rejected == 1
    # writable by others: not used even with a valid MAC (it could change under us)
    os.chmod(entry, 0o666)
    assert compile_model(src, cache=store) is not None and store.rejected == 2
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600  # rewritten by this run
    # a symbolic link to a valid entry elsewhere
    outside = tmp_path / "outside.pdslc"
    outside.write_bytes(entry.read_bytes())
    entry.unlink()
    entry.symlink_to(outside)
    compile_model(src, cache=store)
    assert store.rejected == 3 and not entry.is_symlink() and outside.exists()
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # another user's file, a valid MAC
        os.chown(entry, 65534, 65534)
        compile_model(src, cache=store)
        assert store.rejected == 4 and entry.stat().st_uid == 0
    assert store.last.startswith("stored")
    assert ModelCache(d).load(store.key(src, PENDULUM, compile_model(src, cache=False).options)) is not None
    # the key file readable by others: the directory is refused, one warning
    os.chmod(d / KEY_FILE, 0o644)
    refused = ModelCache(d)
    assert refused.load("x" * 64) is None and not refused.usable()
    assert "key file" in refused.refused and refused.last.startswith("not used")
    assert not ModelCache(d).usable()
    assert capsys.readouterr().err.count(WARNING) == 1
    os.chmod(d / KEY_FILE, 0o600)
    (d / KEY_FILE).write_bytes(b"short")
    assert not ModelCache(d).usable()


def test_ancestors_writable_by_others_are_refused_unless_sticky(tmp_path, monkeypatch):
    monkeypatch.setattr(C, "_WARNED", [True])  # quiet
    parent = tmp_path / "open"
    parent.mkdir()
    os.chmod(parent, 0o777)
    store = ModelCache(parent / "c")
    assert not store.usable() and "ancestor" in store.refused
    os.chmod(parent, 0o1777)  # sticky, as /tmp: others cannot rename our directory away
    assert ModelCache(parent / "c").usable()


def test_key_is_made_once_private_and_shared_by_concurrent_makers(tmp_path):
    d = tmp_path / "c"
    procs = [subprocess.Popen([sys.executable, "-c", "import sys; from pdsl.cache import ModelCache; "
                               "m = ModelCache(sys.argv[1]); assert m.usable(); print(m._secret.hex())", str(d)],
                              stdout=subprocess.PIPE, text=True, env=_env(d)) for _ in range(6)]
    keys = {p.communicate(timeout=120)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert keys == {(d / KEY_FILE).read_bytes().hex()}
    assert stat.S_IMODE((d / KEY_FILE).stat().st_mode) == 0o600
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert not [p for p in d.iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.skipif(CC is None, reason="needs a C compiler")
def test_truncated_library_is_removed_and_rebuilt_not_a_bus_error(tmp_path):
    src = tmp_path / "p.phm"
    src.write_text(PENDULUM)
    d = tmp_path / "c"
    env = _env(d)
    r = _pdsl(_simulate(src, tmp_path / "a.csv", "--compile", "yes"), env)
    assert r.returncode == 0, r.stderr
    libs = sorted(d.glob("rhs-*.so"))
    assert len(libs) == 2
    for lib in libs:
        with open(lib, "r+b") as fh:
            fh.truncate(lib.stat().st_size // 2)
    for _ in range(2):  # every later run: no crash (it was "Bus error", exit 135, every time)
        r = _pdsl(_simulate(src, tmp_path / "b.csv", "--compile", "yes"), env)
        assert r.returncode == 0, (r.returncode, r.stderr)
    r = _pdsl(_simulate(src, tmp_path / "c.csv"), env)
    assert r.returncode == 0 and "compiled C (library from the cache)" in r.stdout, r.stdout + r.stderr
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "c.csv").read_bytes()
    assert all(lib.stat().st_size > 1000 for lib in libs)


def test_no_cache_reads_and_writes_nothing_there(tmp_path):
    """--no-cache and PDSL_NO_CACHE=1: no file under the cache directory (or the default ones) is opened, listed or
    created, by any audited operation (open, os.open, scandir, listdir, mkdir, ctypes.dlopen, ...)."""
    src = tmp_path / "p.phm"
    src.write_text(PENDULUM)
    d, home, xdg = tmp_path / "c", tmp_path / "home", tmp_path / "xdg"
    home.mkdir()
    hook = ("import sys\n"
            "watched = sys.argv.pop(1).split('|')\n"
            "def audit(event, args):\n"
            "    text = ' '.join(map(str, args))\n"
            "    if any(w in text for w in watched):\n"
            "        print('TOUCHED', event, text, file=sys.stderr)\n"
            "sys.addaudithook(audit)\n"
            "from pdsl.cli.main import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    watched = "|".join(str(p) for p in (d, home / ".cache", xdg))
    runs = [(["--no-cache"], {}), ([], {"PDSL_NO_CACHE": "1"})]
    for more, extra in runs:
        for how in (["--compile", "yes"] if CC else ["--compile", "no"], ["--integrator", "dop853"] if CC else []):
            env = _env(d, HOME=str(home), XDG_CACHE_HOME=str(xdg), **extra)
            r = subprocess.run([sys.executable, "-c", hook, watched, "simulate", str(src), "--t-end", "1", "--dt", "0.1",
                                *how, *more, "-o", str(tmp_path / "o.csv")], capture_output=True, text=True, env=env,
                               timeout=300)
            assert r.returncode == 0, r.stderr
            assert "TOUCHED" not in r.stderr, r.stderr
    assert not d.exists() and not xdg.exists() and list(home.iterdir()) == []


def _old(path: Path, seconds: float = 7200) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t), follow_symlinks=False)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_abandoned_temporaries_are_swept_live_ones_kept(tmp_path):
    src = tmp_path / "p.phm"
    src.write_text(PENDULUM)
    d = tmp_path / "c"
    assert ModelCache(d).usable()
    dead = d / f".tmp-{_dead_pid()}-{'a' * 16}.pdslc"  # its writer is gone (no lock)
    dead.write_bytes(b"x" * 1000)
    _old(dead)
    fresh_dead = d / f".tmp-{_dead_pid()}-{'b' * 16}.pdslc"  # too young to judge: may not be locked yet
    fresh_dead.write_bytes(b"x")
    legacy_old = d / ".tmp-abc123.pdslc"  # an older pdsl's mkstemp name: by age only
    legacy_old.write_bytes(b"x")
    _old(legacy_old)
    legacy_young = d / ".tmp-rhs-def456.so"
    legacy_young.write_bytes(b"x")
    _old(legacy_young, 600)
    # killed with SIGKILL while it held its temporary
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; from pdsl.cache import temporary_file; "
                              "fd, path = temporary_file(sys.argv[1], suffix='.pdslc'); print(path, flush=True); "
                              "time.sleep(300)", str(d)], stdout=subprocess.PIPE, text=True, env=_env(d))
    killed = Path(child.stdout.readline().strip())
    # alive: a writer in another process holding its lock, and one in this process
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pdsl.cache import temporary_file; "
                               "fd, path = temporary_file(sys.argv[1], suffix='.so'); print(path, flush=True); "
                               "time.sleep(300)", str(d)], stdout=subprocess.PIPE, text=True, env=_env(d))
    live = Path(holder.stdout.readline().strip())
    fd, mine = temporary_file(d, suffix=".pdslc")
    try:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        for p in (killed, live, Path(mine)):
            _old(p)
        r = _pdsl(_simulate(src, tmp_path / "o.csv"), _env(d))
        assert r.returncode == 0, r.stderr
        assert "3 abandoned temporaries removed" in r.stderr, r.stderr
        assert not dead.exists() and not legacy_old.exists() and not killed.exists()
        assert fresh_dead.exists() and legacy_young.exists() and live.exists() and Path(mine).exists()
    finally:
        holder.kill()
        holder.wait()
        os.close(fd)


def test_live_temporaries_count_in_the_size_bound(tmp_path):
    d = tmp_path / "c"
    store = ModelCache(d)
    for k in range(3):
        p = tmp_path / f"m{k}.phm"
        p.write_text(PENDULUM.replace("l = 1.3", f"l = 1.{k + 4}"))
        compile_model(p, cache=store)
    entries = list(d.glob("*.pdslc"))
    total = sum(f.stat().st_size for f in entries)
    fd, tmp = temporary_file(d, suffix=".so")  # a live writer's half-written library
    try:
        os.write(fd, b"\0" * (total // 2))
        ModelCache(d, max_bytes=total).prune()
        assert Path(tmp).exists() and len(list(d.glob("*.pdslc"))) < 3
    finally:
        os.close(fd)


@pytest.mark.skipif(CC is None, reason="needs a C compiler")
def test_abandoned_compiler_work_directories_are_swept(tmp_path, monkeypatch):
    import tempfile

    from pdsl.sim import compiled

    monkeypatch.setenv("TMPDIR", str(tmp_path / "t"))
    (tmp_path / "t").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)
    stale = tmp_path / "t" / f"{compiled.WORK_PREFIX}{_dead_pid()}-{'c' * 16}"
    stale.mkdir()
    (stale / "pdsl_rhs.c").write_text("int x;")
    _old(stale)
    other = tmp_path / "t" / "pdsl-cc-unrelated"  # not our naming: left alone
    other.mkdir()
    _old(other)
    compiled._build("int pdsl_f(void) { return 1; }\n", "d" * 64, CC, None, load=lambda p: p)
    assert not stale.exists() and other.exists()
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == ["pdsl-cc-unrelated"]


@pytest.mark.skipif(CC is None, reason="an FMU needs a C compiler")
def test_abandoned_fmu_build_folders_are_swept(tmp_path):
    from pdsl.cli.main import main

    out = tmp_path / "dp.fmu"
    tag = f".{out.name}.tmp-"
    folder = tmp_path / f"{tag}{_dead_pid()}-{'e' * 16}"  # what kill -9 during a build leaves
    (folder / "sources").mkdir(parents=True)
    (folder / "sources" / "model.c").write_text("int x;")
    half = tmp_path / f"{tag}{_dead_pid()}-{'f' * 16}.fmu"
    half.write_bytes(b"PK\x03\x04")
    for p in (folder, half):
        _old(p)
    assert main(["compile", str(MODELS / "double_pendulum.phm"), "--target", "fmu", "-o", str(out), "--no-cache"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dp.fmu"]


# ------------------------------------------------------------------ the torch backend's compiled core
TORCH_CORE = ("import sys\n"
              "sys.addaudithook(lambda event, args: event == 'ctypes.dlopen' and print('DLOPEN', args[0], file=sys.stderr))\n"
              "from pdsl.cache import ModelCache, using\n"
              "from pdsl.pipeline import compile_model\n"
              "from pdsl.backend.torch_backend import TorchSystem\n"
              "src, d = sys.argv[1:3]\n"
              "store = None if d == '-' else ModelCache(d)\n"
              "c = compile_model(src, cache=False)\n"
              "with using(store):\n"
              "    ts = TorchSystem(c.system, core='c')\n"
              "print(ts.core, -1 if store is None else store.rejected)\n")


def _torch_core(src: Path, d, env: dict) -> tuple[str, list[str]]:
    """Build the compiled core of ``src`` in a fresh process with the cache ``d`` (None: none, as --no-cache):
    ``(its last line: "c <entries rejected>", the paths it dlopen-ed)``."""
    r = subprocess.run([sys.executable, "-c", TORCH_CORE, str(src), "-" if d is None else str(d)], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1], [line.split(" ", 1)[1] for line in r.stderr.splitlines()
                                                if line.startswith("DLOPEN ")]


def _tree(d: Path) -> dict:
    """Every file under ``d``: bytes, mode, owner."""
    return {str(p.relative_to(d)): (p.read_bytes(), p.stat().st_mode, p.stat().st_uid) for p in sorted(d.rglob("*"))
            if p.is_file()}


def _old_torch_core_name(src: Path, monkeypatch) -> str:
    """The name the torch core was loaded from before (``<$PDSL_CACHE or ~/.cache/pdsl>/torch_core/pdsl_core_<sha256 of
    its C, 24 digits>.so``): the C text captured in this process."""
    import hashlib

    from pdsl.backend import torch_core

    sources = []

    def capture(source):
        sources.append(source)
        raise OSError("captured")

    monkeypatch.setattr(torch_core, "_library", capture)
    system = compile_model(src, cache=False).system
    assert torch_core.build_core(system, {}, system.input_laws()) is None and len(sources) == 1
    return f"pdsl_core_{hashlib.sha256(sources[0].encode()).hexdigest()[:24]}.so"


@pytest.mark.skipif(CC is None, reason="the compiled core needs a C compiler")
@pytest.mark.parametrize("forged", [False, True])
def test_torch_core_loads_only_authenticated_libraries(tmp_path, monkeypatch, forged):
    """The torch backend's compiled core (pdsl.backend.torch_core) used to dlopen pdsl_core_<hash>.so from
    $PDSL_CACHE/torch_core or ~/.cache/pdsl/torch_core unchecked: a library planted at the names it loads (the old
    ones, and its entry's name now), in a directory others can write or in our own without a valid MAC, is never
    loaded (its constructor would write the marker)."""
    pytest.importorskip("torch")
    src = tmp_path / "p.phm"
    src.write_text(PENDULUM)
    home = tmp_path / "home"
    env = _env(tmp_path / "unused", HOME=str(home))
    env.pop("XDG_CACHE_HOME", None)
    good = tmp_path / "good"
    assert _torch_core(src, good, env)[0] == "c 0"
    (name,) = [p.name for p in good.iterdir() if p.name.endswith(".so")]  # the name it loads now
    assert name.startswith("rhs-")
    old_name = _old_torch_core_name(src, monkeypatch)
    marker = tmp_path / "marker"
    lib = _planted_library(tmp_path, marker)
    planted = lib + C.LIBRARY_MAGIC + os.urandom(32) if forged else lib
    # a directory others can write: refused whole, the planted files left as evidence; the old places: never read
    shared = tmp_path / "shared"
    (shared / "torch_core").mkdir(parents=True)
    (home / ".cache" / "pdsl" / "torch_core").mkdir(parents=True)
    os.chmod(shared, 0o777)
    for f in (shared / name, shared / "torch_core" / old_name, home / ".cache" / "pdsl" / "torch_core" / old_name):
        f.write_bytes(planted)
    before = _tree(shared), _tree(home)
    line, opened = _torch_core(src, shared, {**env, "PDSL_CACHE": str(shared)})
    assert line == "c 0" and not marker.exists(), line
    assert not [p for p in opened if str(shared) in p or str(home) in p], opened
    assert (_tree(shared), _tree(home)) == before and len(before[0]) == 2
    # our own directory: the planted library is rejected (removed) and rebuilt, then loaded from the cache
    mine = tmp_path / "mine"
    (mine / "torch_core").mkdir(mode=0o700, parents=True)
    os.chmod(mine, 0o700)
    for f in (mine / name, mine / "torch_core" / old_name):
        f.write_bytes(planted)
    line, opened = _torch_core(src, mine, {**env, "PDSL_CACHE": str(mine)})
    assert line == "c 1" and not marker.exists(), line
    assert (mine / name).read_bytes() != planted and (mine / name).stat().st_size > 1000
    line, opened = _torch_core(src, mine, env)
    assert line == "c 0" and not marker.exists()
    if Path("/proc/self/fd").is_dir():  # loaded through the descriptor whose bytes were verified
        assert [p for p in opened if p.startswith("/proc/self/fd/")], opened
    assert not [p for p in opened if "torch_core" in p or str(mine) in p], opened


@pytest.mark.skipif(CC is None, reason="the compiled core needs a C compiler")
def test_torch_core_without_a_cache_touches_no_cache_directory(tmp_path):
    """--no-cache (no active cache): the core is built privately; no cache directory (PDSL_CACHE_DIR, the older
    PDSL_CACHE, ~/.cache/pdsl, $XDG_CACHE_HOME/pdsl) is opened, listed, created or dlopen-ed from."""
    pytest.importorskip("torch")
    src = tmp_path / "p.phm"
    src.write_text(PENDULUM)
    d, old, home, xdg = tmp_path / "c", tmp_path / "old", tmp_path / "home", tmp_path / "xdg"
    home.mkdir()
    watched = [d, old, home / ".cache" / "pdsl", xdg / "pdsl"]
    hook = ("import sys\n"
            f"watched = {[str(p) for p in watched]!r}\n"
            "def audit(event, args):\n"
            "    text = ' '.join(map(str, args))\n"
            "    if any(w in text for w in watched):\n"
            "        print('TOUCHED', event, text, file=sys.stderr)\n"
            "sys.addaudithook(audit)\n")
    env = _env(d, PDSL_CACHE=str(old), HOME=str(home), XDG_CACHE_HOME=str(xdg))
    r = subprocess.run([sys.executable, "-c", hook + TORCH_CORE, str(src), "-"], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "c -1"
    assert "TOUCHED" not in r.stderr, r.stderr
    assert not any(p.exists() for p in watched)


def test_pdsl_cache_is_the_older_name_of_pdsl_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("PDSL_CACHE_DIR", raising=False)
    monkeypatch.setenv("PDSL_CACHE", str(tmp_path / "old"))
    assert C.cache_dir() == tmp_path / "old"
    monkeypatch.setenv("PDSL_CACHE_DIR", str(tmp_path / "new"))
    assert C.cache_dir() == tmp_path / "new"


# ------------------------------------------------------------------ temporaries next to outputs
SLOW_WRITER = ("import sys, time\n"
               "import pdsl.data.csvio as m\n"
               "rows = m.write_rows\n"
               "def stop_before_the_rename(fh, *args, **kw):\n"
               "    rows(fh, *args, **kw)\n"
               "    fh.flush()\n"
               "    print(fh.name, flush=True)\n"
               "    time.sleep(600)\n"
               "m.write_rows = stop_before_the_rename\n"
               "from pdsl.cli.main import main\n"
               "sys.exit(main(sys.argv[1:]))\n")


def _line(proc: subprocess.Popen, cap_s: float = 240.0) -> str:
    """The first line ``proc`` prints (waiting up to ``cap_s``)."""
    import select

    ready, _, _ = select.select([proc.stdout], [], [], cap_s)
    assert ready, f"no output within {cap_s} s"
    line = proc.stdout.readline().strip()
    assert line, proc.stderr.read() if proc.poll() is not None else "empty line"
    return line


def test_output_temporary_of_a_killed_simulate_is_swept_by_the_next_write(tmp_path):
    """``pdsl simulate -o big.csv`` killed with SIGKILL between writing its temporary and renaming it leaves
    ``.big.csv.tmp-<pid>-<hex>/big.csv`` (megabytes); the next ``simulate -o`` into the same directory removes it,
    and keeps the temporary of a writer that still runs."""
    src = tmp_path / "p.phm"
    src.write_text(PENDULUM)
    out = tmp_path / "out"
    out.mkdir()
    env = _env(tmp_path / "c")
    args = ["simulate", str(src), "--t-end", "2000", "--dt", "0.01", "--no-cache", "-o"]
    killed = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, *args, str(out / "big.csv")], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
    live = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, *args, str(out / "live.csv")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        written = Path(_line(killed))
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=60)
        left = written.parent
        assert left.parent == out and left.name.startswith(f".big.csv.tmp-{killed.pid}-") and written.name == "big.csv"
        assert written.stat().st_size > 3_000_000  # 200,001 rows
        writing = Path(_line(live)).parent
        assert writing.name.startswith(".live.csv.tmp-")
        legacy = out / ".next.csv.k3j_9x0a.csv"  # an older pdsl's mkstemp temporary of the same output
        legacy.write_text("t,q\n")
        unrelated = out / ".next.csv.keep"  # not a temporary's name: never touched
        unrelated.write_text("mine")
        for p in (writing, legacy, unrelated):  # `left` stays young: its writer's pid is gone, it goes at once
            _old(p)
        young = out / f".next.csv.tmp-{os.getpid()}-{'a' * 16}.csv"  # unlocked, its pid alive: too young to judge
        young.write_text("x")
        old_unlocked = out / f".next.csv.tmp-{os.getpid()}-{'b' * 16}.csv"  # unlocked a minute after: abandoned
        old_unlocked.write_text("x")
        _old(old_unlocked)
        r = _pdsl(["simulate", str(src), "--t-end", "1", "--dt", "0.1", "--no-cache", "-o", str(out / "next.csv")], env)
        assert r.returncode == 0, r.stderr
        assert not left.exists() and not legacy.exists() and not old_unlocked.exists()
        assert writing.exists() and unrelated.exists() and young.exists()
        assert (out / "next.csv").exists() and not (out / "big.csv").exists() and live.poll() is None
    finally:
        for p in (killed, live):
            if p.poll() is None:
                p.kill()
            p.wait(timeout=60)


def test_atomic_path_temporary_is_locked_and_has_plain_permissions(tmp_path):
    from pdsl.data.csvio import atomic_path

    target = tmp_path / "o.csv"
    umask = os.umask(0o022)
    try:
        with atomic_path(target) as tmp:
            assert tmp.parent.parent == tmp_path and tmp.parent.name.startswith(".o.csv.tmp-") and tmp.name == "o.csv"
            assert stat.S_IMODE(tmp.stat().st_mode) == 0o644  # as open() would make it
            _old(tmp.parent)
            assert C.sweep_output_temporaries(tmp_path, target) == 0 and tmp.exists()  # its writer lives: kept
            tmp.write_text("a\n")
    finally:
        os.umask(umask)
    assert target.read_text() == "a\n" and sorted(p.name for p in tmp_path.iterdir()) == ["o.csv"]
    with pytest.raises(ZeroDivisionError):
        with atomic_path(target) as tmp:
            tmp.write_text("b\n")
            1 / 0
    assert target.read_text() == "a\n" and sorted(p.name for p in tmp_path.iterdir()) == ["o.csv"]
    long = tmp_path / ("x" * 250 + ".csv")  # the temporary's name still fits in NAME_MAX
    with atomic_path(long) as tmp:
        tmp.write_text("c\n")
    assert long.read_text() == "c\n"


def test_compile_output_temporaries_are_swept_live_ones_kept(tmp_path):
    """``pdsl compile -o DIR`` builds in ``.DIR.tmp-<pid>-<hex>`` (locked): one a killed compile left is removed by the
    next write into the parent directory, a live one is kept."""
    from pdsl.cli.main import main

    out = tmp_path / "m"
    dead = tmp_path / f".m.tmp-{_dead_pid()}-{'c' * 16}"  # what kill -9 during a compile leaves
    (dead / "sub").mkdir(parents=True)
    (dead / "sub" / "model.c").write_text("int x;")
    _old(dead)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pdsl.cache import temporary_dir, "
                               "output_temp_prefix\nwith temporary_dir(sys.argv[1], output_temp_prefix(sys.argv[2])) as d:\n"
                               "    print(d, flush=True); time.sleep(600)", str(tmp_path), str(tmp_path / "other")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path / "c"))
    try:
        live = Path(_line(holder))
        _old(live)
        assert main(["compile", str(MODELS / "double_pendulum.phm"), "--target", "python", "-o", str(out),
                     "--no-cache"]) == 0
        assert not dead.exists() and live.is_dir()
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["m", live.name])
    finally:
        holder.kill()
        holder.wait(timeout=60)
