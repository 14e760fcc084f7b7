"""``@record``: the frozen, slotted, keyword-only dataclass of pdsl's representations, made cheaply.

The AST, the resolved model and the symbolic IR are ~90 frozen dataclasses. Python 3.11's
``dataclass(frozen=True, slots=True, kw_only=True)`` compiles six methods per class, each with its own
``exec`` (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``), and
calls ``inspect.signature`` for every class without a docstring: ~45 ms of every command that parses
a model (measured: ``benchmarks/bench_startup_scale.py``; Python 3.13 batches these itself).

``record`` lets :func:`dataclasses.dataclass` do everything but the methods — field collection
(``ClassVar``, defaults, ``field(...)``, inheritance), ``__dataclass_fields__``, ``__match_args__``
and the slotted class — so :func:`dataclasses.fields`, :func:`dataclasses.replace`,
:func:`dataclasses.asdict` and :func:`dataclasses.is_dataclass` work unchanged. It then compiles only
``__init__`` (one ``exec``) and shares one implementation of the other methods between all classes,
with the semantics of the generated ones: equality and hash over the ``compare`` fields (only between
instances of the same class), ``repr`` over the ``repr`` fields, assignment and deletion refused with
:class:`dataclasses.FrozenInstanceError`, pickling through ``__getstate__``/``__setstate__``.
"""

from __future__ import annotations

import dataclasses
import keyword
import reprlib
from operator import attrgetter

__all__ = ["record"]

_MISSING = dataclasses.MISSING


def record(cls=None, /, *, kw_only: bool = True, slots: bool = True):
    """Use as ``@record`` where ``@dataclass(frozen=True, slots=True, kw_only=True)`` would stand;
    ``@record(kw_only=False)`` and ``@record(slots=False)`` for the frozen dataclass with positional
    parameters or with an instance ``__dict__`` (a ``functools.cached_property``)."""
    if cls is None:
        return lambda c: record(c, kw_only=kw_only, slots=slots)
    documented = bool(cls.__dict__.get("__doc__"))
    if not documented:
        cls.__doc__ = cls.__name__  # a placeholder: dataclass would build one with inspect.signature (slow)
    cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False, frozen=False, slots=slots, kw_only=kw_only)
    fields = dataclasses.fields(cls)
    names = tuple(f.name for f in fields)
    if not documented:
        _set(cls, "__doc__", f"{cls.__name__}({', '.join(names)})")
    _set(cls, "__init__", _make_init(cls, fields))
    _set(cls, "__record_names__", names)
    _set(cls, "__record_compare__", staticmethod(_getter(tuple(f.name for f in fields if f.compare))))
    _set(cls, "__record_hash__", staticmethod(_getter(tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)))))
    _set(cls, "__record_repr__", tuple(f.name for f in fields if f.repr))
    own = cls.__dict__
    for name, fn in _SHARED.items():
        if not slots and name in ("__getstate__", "__setstate__"):
            continue  # pickled through the instance __dict__, restored without __setattr__
        # as dataclass: a method the class defines is kept, except the __hash__ = None that Python adds to
        # a class defining __eq__ (a frozen dataclass with eq gets its field hash then)
        if name not in own or (name == "__hash__" and own[name] is None and "__eq__" in own):
            _set(cls, name, fn)
    return cls


def _set(cls, name: str, value) -> None:
    type.__setattr__(cls, name, value)


def _getter(names: tuple[str, ...]):
    """A function returning the tuple of the named attributes (attrgetter returns a bare value for one name)."""
    if not names:
        return lambda obj: ()
    if len(names) == 1:
        get = attrgetter(names[0])
        return lambda obj: (get(obj),)
    return attrgetter(*names)


def _make_init(cls, fields):
    """``__init__(self, a, b=<default>, *, c=<factory>)``, as the frozen dataclass's: the keyword-only fields
    (all of them under ``kw_only=True``) after the ``*``.

    The source compiled here holds nothing but the field names of a class defined in Python source (a class
    body's annotations; model text never makes classes), each checked to be a plain identifier; defaults and
    factories are passed as objects in the namespace, never written into the text."""
    for f in fields:
        if not (isinstance(f.name, str) and f.name.isidentifier() and not keyword.iskeyword(f.name)
                and not f.name.startswith("__")):
            raise TypeError(f"@record {cls.__qualname__}: field name {f.name!r} is not a plain identifier")
    env = {"__setattr": object.__setattr__, "__factory_marker": _FACTORY}
    params, kw_params, body = [], [], []
    for f in fields:
        if not f.init:
            if f.default is not _MISSING:
                env[f"__dflt_{f.name}"] = f.default
                body.append(f"__setattr(self, {f.name!r}, __dflt_{f.name})")
            elif f.default_factory is not _MISSING:
                env[f"__fact_{f.name}"] = f.default_factory
                body.append(f"__setattr(self, {f.name!r}, __fact_{f.name}())")
            continue
        into = kw_params if f.kw_only else params
        if f.default is not _MISSING:
            env[f"__dflt_{f.name}"] = f.default
            into.append(f"{f.name}=__dflt_{f.name}")
            body.append(f"__setattr(self, {f.name!r}, {f.name})")
        elif f.default_factory is not _MISSING:
            env[f"__fact_{f.name}"] = f.default_factory
            into.append(f"{f.name}=__factory_marker")
            body.append(f"__setattr(self, {f.name!r}, __fact_{f.name}() if {f.name} is __factory_marker else {f.name})")
        else:
            into.append(f.name)
            body.append(f"__setattr(self, {f.name!r}, {f.name})")
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    signature = ", ".join(["self", *params, *(["*", *kw_params] if kw_params else [])])
    src = f"def __init__({signature}):\n    " + ("\n    ".join(body) or "pass") + "\n"
    ns: dict = {}
    exec(src, env, ns)  # noqa: S102 - only checked identifiers of a Python class's own fields (see above)
    init = ns["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    return init


class _Factory:
    """The default of a parameter whose field has a ``default_factory``."""

    def __repr__(self):
        return "<factory>"


_FACTORY = _Factory()


# ---------------------------------------------------------------- the shared methods
def _eq(self, other):
    if other.__class__ is self.__class__:
        return self.__record_compare__(self) == other.__record_compare__(other)
    return NotImplemented


def _hash(self):
    return hash(self.__record_hash__(self))


@reprlib.recursive_repr()
def _repr(self):
    parts = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__record_repr__)
    return f"{self.__class__.__qualname__}({parts})"


def _setattr(self, name, value):
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self, name):
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _getstate(self):
    return [getattr(self, n) for n in self.__record_names__]


def _setstate(self, state):
    for n, v in zip(self.__record_names__, state):
        object.__setattr__(self, n, v)


_SHARED = {
    "__eq__": _eq,
    "__hash__": _hash,
    "__repr__": _repr,
    "__setattr__": _setattr,
    "__delattr__": _delattr,
    "__getstate__": _getstate,
    "__setstate__": _setstate,
}
