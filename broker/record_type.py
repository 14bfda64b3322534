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

from collections.abc import Mapping
from dataclasses import dataclass, fields
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

    for method in (__eq__, __hash__, __repr__):
        method.__qualname__ = f"{made.__qualname__}.{method.__name__}"
        setattr(made, method.__name__, method)
    params = made.__dataclass_params__
    params.repr = params.eq = True  # in effect, as dataclass(eq=True, repr=True) says
    return made  # type: ignore[no-any-return]


def from_row(cls: type[T], row: Mapping[str, Any], /, **given: Any) -> T:
    """A record read from a row by name: each field is the column of its own
    name, except those ``given`` (a renamed column, a decoded one). The one row
    mapper of the broker: a field with no column of its name and not given is a
    ``KeyError`` (a query and its record out of step), never a silent default."""
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    return cls(**{n: given[n] if n in given else row[n] for n in names})
