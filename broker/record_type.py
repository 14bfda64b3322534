"""``@record``: ``@dataclass(frozen=True, slots=True)`` at about half the import cost.

``dataclasses`` writes the source of six methods per class (``__init__``,
``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``) and
compiles each one when the module is imported. The broker defines ~50 such
classes on the path of every CLI call (an agent's tool call), and compiling
their methods was ~30 ms of a ~150 ms ``broker msg send``. Here dataclasses
generates only what must be per class (``__init__`` with its real signature,
and the frozen ``__setattr__`` / ``__delattr__``); ``__repr__``, ``__eq__``
and ``__hash__`` are closures over the field names, with the same results as
dataclasses' own: ``Name(a=1, b='x')`` (``...`` on recursion), equal only to
an instance of the very same class with equal fields (in order), hashed as
the tuple of the fields. The class is a dataclass all the same (``fields``,
``replace``, ``asdict``, ``is_dataclass``, pickling, ``FrozenInstanceError``),
and its ``__dataclass_params__`` say ``repr`` and ``eq`` as they are in effect.

``from_row`` is the one way a record is read from a database row: field by
field, by name, each caller giving only the columns it renames or decodes.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from operator import attrgetter
from reprlib import recursive_repr
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")
# A record's ``__pydantic_config__`` when its attributes have docstrings: read by
# pydantic (TypeAdapter) only, for the field descriptions of its JSON schema.
DOCSTRINGS = {"use_attribute_docstrings": True}
_NAMES: dict[type, tuple[str, ...]] = {}


def _fields_of(names: tuple[str, ...]) -> Any:
    """The fields of an instance as a tuple (attrgetter of one name gives no tuple)."""
    if len(names) == 1:
        (name,) = names
        return lambda obj: (getattr(obj, name),)
    return attrgetter(*names) if names else (lambda _obj: ())


@dataclass_transform(frozen_default=True)
def record(cls: type[T]) -> type[T]:
    """A frozen, slotted dataclass, equal in behaviour to ``@dataclass(frozen=True, slots=True)``."""
    made: Any = dataclass(frozen=True, slots=True, eq=False, repr=False)(cls)
    declared = fields(made)
    if any(not f.compare or not f.repr or f.hash is not None for f in declared):
        # The closures below compare, hash and show every field: a field
        # option saying otherwise would be silently ignored.
        raise TypeError(f"{cls.__qualname__}: @record takes no compare/repr/hash field options")
    names = tuple(f.name for f in declared)
    values = _fields_of(names)

    def __eq__(self: Any, other: Any) -> Any:  # noqa: N807 - the method itself
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    def __hash__(self: Any) -> int:  # noqa: N807
        return hash(values(self))

    @recursive_repr()
    def __repr__(self: Any) -> str:  # noqa: N807
        shown = ", ".join(f"{n}={v!r}" for n, v in zip(names, values(self), strict=True))
        return f"{self.__class__.__qualname__}({shown})"

    init = _fast_init(made)
    for method in (__eq__, __hash__, __repr__, *((init,) if init else ())):
        method.__qualname__ = f"{made.__qualname__}.{method.__name__}"
        setattr(made, method.__name__, method)
    params = made.__dataclass_params__
    params.repr = params.eq = True  # in effect, as dataclass(eq=True, repr=True) says
    return made  # type: ignore[no-any-return]


def _fast_init(cls: Any) -> Any:
    """An ``__init__`` for a frozen slotted class that sets each field through
    its slot directly, with dataclasses' own signature and defaults: the
    frozen ``__init__`` of dataclasses goes through ``object.__setattr__``
    once a field, about 0.1 µs each (a 12-field record took 1.7 µs to make,
    an unfrozen one 0.45), and every call of every surface makes several.
    None (dataclasses' stays) for a field outside ``__init__`` or a
    ``__post_init__``."""
    declared = fields(cls)
    if hasattr(cls, "__post_init__") or any(not f.init for f in declared):
        return None
    given = cls.__init__
    params = list(inspect.signature(given).parameters.values())[1:]
    scope: dict[str, Any] = {}
    heads, body = [], []
    star = False
    for f, p in zip(declared, params, strict=True):
        if p.kind is inspect.Parameter.KEYWORD_ONLY and not star:
            heads.append("*")
            star = True
        heads.append(f.name)
        slot = next(k.__dict__[f.name] for k in cls.__mro__ if f.name in k.__dict__)
        scope[f"_set_{f.name}"] = slot.__set__  # a base record's own slot, if it declared it
        if f.default_factory is not MISSING:
            scope[f"_make_{f.name}"] = f.default_factory
            scope["_FACTORY"] = p.default  # dataclasses' marker of a factory field
            body.append(f" if {f.name} is _FACTORY: {f.name} = _make_{f.name}()")
        body.append(f" _set_{f.name}(self, {f.name})")
    source = f"def __init__(self, {', '.join(heads)}):\n" + ("\n".join(body) or " pass") + "\n"
    exec(source, scope)  # noqa: S102 - our own text, made of field names
    init = scope["__init__"]
    init.__defaults__, init.__kwdefaults__ = given.__defaults__, given.__kwdefaults__
    init.__annotations__ = given.__annotations__
    return init


def from_row(cls: type[T], row: Mapping[str, Any], /, **given: Any) -> T:
    """A record read from a row by name: each field is the column of its own
    name, except those ``given`` (a renamed column, a decoded one). The one row
    mapper of the broker: a field with no column of its name and not given is a
    ``KeyError`` (a query and its record out of step), never a silent default."""
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    return cls(**{n: given[n] if n in given else row[n] for n in names})
