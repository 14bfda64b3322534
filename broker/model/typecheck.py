"""Types checked at the Python API's edge (S33): every public method of the
handles (``Agent``, ``Operator`` and their mixins) checks its arguments
against its own annotations before anything runs, so a wrong type is
``invalid_input`` naming the parameter, never a ``TypeError`` from deep inside.

Text must be valid UTF-8 (no lone surrogates) without NUL (which PostgreSQL
cannot store: both backends give the same answer), whole numbers fit SQLite's
64 bits, other numbers are finite; a bool is not a number and a number is not
a bool. Text inside a mapping argument, an ``Any`` one and the ``**kwargs``
catch-alls (join fields, space settings) is checked the same way, by the
keyword's name. Annotations this module does not know (records, callables)
are left to the method. The hints of a method are resolved once, on its
first call. ``utc_time`` reads a ``since`` time, for the library's handles and
the remote client's alike (both may import this module).
"""

from __future__ import annotations

import functools
import inspect
import math
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from broker import errors
from broker.model.bounds import text_problem

C = TypeVar("C", bound=type)
_UNCHECKED = object()
_INT64 = 2**63


_DEPTH = 8  # how deep text inside nested lists and mappings is looked at


def _text_inside(value: Any, depth: int = 0) -> str | None:
    """Why text somewhere inside ``value`` (a mapping's keys and values, a
    list's items) could not be stored, or None. Records and other objects are
    the method's own business."""
    if isinstance(value, str):
        return text_problem(value)
    if depth >= _DEPTH:
        return None
    if isinstance(value, Mapping):
        for k, v in value.items():
            why = _text_inside(k, depth + 1) or _text_inside(v, depth + 1)
            if why is not None:
                return why
    elif isinstance(value, list | tuple | set | frozenset):
        for v in value:
            why = _text_inside(v, depth + 1)
            if why is not None:
                return why
    return None


def _kind_fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of the kind ``hint`` is about (text for ``str``, a
    number for ``int``...): a union's refusal is the one of the option the
    value was meant for (``[1, 5]`` for ``str | list[str]`` is a list whose
    item is wrong, not "text, not list")."""
    origin = typing.get_origin(hint) or hint
    if origin is bool:
        return isinstance(value, bool)
    if origin in (int, float):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if origin in (list, tuple, set, frozenset, Iterable, Sequence):
        return isinstance(value, Iterable) and not isinstance(value, str | bytes | Mapping)
    if origin in (dict, Mapping):
        return isinstance(value, Mapping)
    return isinstance(origin, type) and isinstance(value, origin)


def _problem(value: Any, hint: Any) -> str | None:  # noqa: PLR0911, PLR0912 - one case per kind of hint
    """Why ``value`` does not fit ``hint`` (None when it fits or cannot be told)."""
    if hint is _UNCHECKED:
        return None
    if hint is Any or hint is object:
        return _text_inside(value)
    if hint is str:  # the usual hint first: no typing introspection for it
        if not isinstance(value, str):
            return f"text, not {type(value).__name__}"
        return text_problem(value)
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        options = [o for o in typing.get_args(hint) if o is not type(None)]
        if value is None and len(options) < len(typing.get_args(hint)):
            return None
        found = [(_problem(value, o), o) for o in options]
        if any(p is None for p, _ in found):
            return None
        meant = [p for p, o in found if _kind_fits(value, o)]
        return (meant or [p for p, _ in found] or ["not None"])[0]
    if origin is typing.Literal:
        allowed = typing.get_args(hint)
        return None if value in allowed else f"one of {', '.join(map(str, allowed))}"
    if hint is type(None):
        return None if value is None else "None"
    if hint is bool:
        return None if isinstance(value, bool) else f"true or false, not {type(value).__name__}"
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"a whole number, not {type(value).__name__}"
        return None if -_INT64 <= value < _INT64 else "a whole number within 64 bits"
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"a number, not {type(value).__name__}"
        return None if math.isfinite(value) else "a finite number"
    if origin in (list, tuple, set, frozenset, Iterable, Sequence) and origin is not None:
        if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
            return f"a list, not {type(value).__name__}"
        if origin in (list, tuple, Sequence) and not isinstance(value, Sequence):
            # A set has no order and an iterator is read once: "a list" is what is meant.
            return f"a list, not {type(value).__name__}"
        args = typing.get_args(hint)
        item = args[0] if args and args[-1] is not Ellipsis or len(args) == 2 else Any
        if isinstance(value, Iterable) and not isinstance(value, list | tuple | set | frozenset):
            return None  # a one-shot iterator: the method reads it once, checking its items
        if typing.get_origin(item) in (dict, Mapping):
            # A batch's items (send_many): each is checked by the method, which
            # names the item it refuses (S33); only their kind is checked here.
            item = Mapping
        for n, v in enumerate(value):
            why = _problem(v, item)
            if why is not None:
                return f"item {n} should be {why}"
        return None
    if hint is Mapping:
        return None if isinstance(value, Mapping) else f"a mapping, not {type(value).__name__}"
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            return f"a mapping, not {type(value).__name__}"
        return _text_inside(value)
    if isinstance(value, str):  # a path given as text, a Literal's alias...
        return text_problem(value)
    return None  # a record, a callable, a path: the method's own business


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - annotations only for type checkers (TYPE_CHECKING)
        hints: dict[str, Any] = {}
        module = inspect.getmodule(fn)
        ns = vars(module) if module else {}
        for name, raw in getattr(fn, "__annotations__", {}).items():
            try:
                hints[name] = eval(raw, ns) if isinstance(raw, str) else raw  # noqa: S307
            except Exception:  # noqa: BLE001
                hints[name] = _UNCHECKED
        return hints


class _Plan:
    """A method's parameters as the wrapper checks them, worked out on its first
    call: which names a call may pass by position or by keyword, which must be
    given, and the hint of each checked one (``self``, ``cls``, ``tx`` and the
    ``*args`` / ``**kwargs`` catch-alls have no hint: the types and bounds of
    settings and fields are checked inside, by strict models, and their text
    here, by name, ``_check_extra``)."""

    __slots__ = (
        "by_keyword",
        "checks",
        "positional",
        "required",
        "sig",
        "simple",
        "var_keyword",
        "var_name",
    )

    def __init__(self, sig: inspect.Signature, hints: dict[str, Any]) -> None:
        self.sig = sig
        params = list(sig.parameters.values())
        kind = inspect.Parameter
        self.positional = [
            p.name for p in params if p.kind in (kind.POSITIONAL_ONLY, kind.POSITIONAL_OR_KEYWORD)
        ]
        self.by_keyword = {
            p.name for p in params if p.kind in (kind.POSITIONAL_OR_KEYWORD, kind.KEYWORD_ONLY)
        }
        self.required = {
            p.name
            for p in params
            if p.default is p.empty and p.kind not in (kind.VAR_POSITIONAL, kind.VAR_KEYWORD)
        }
        self.var_keyword = any(p.kind is kind.VAR_KEYWORD for p in params)
        self.var_name = next((p.name for p in params if p.kind is kind.VAR_KEYWORD), None)
        self.checks = {
            p.name: hints.get(p.name, _UNCHECKED)
            for p in params
            if p.name not in ("self", "cls", "tx")
            and p.kind not in (kind.VAR_POSITIONAL, kind.VAR_KEYWORD)
        }
        # Positional-only parameters or *args: every call goes through Signature.bind.
        self.simple = not any(p.kind in (kind.POSITIONAL_ONLY, kind.VAR_POSITIONAL) for p in params)

    def culprit(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        """The argument a call that does not bind is wrong about, found in the
        order ``Signature.bind`` checks (so it is the one its message names):
        one given twice or a required one missing, parameter by parameter, then
        a keyword the method does not take. None for a call wrong as a whole
        (too many positional arguments)."""
        if not self.simple or len(args) > len(self.positional):
            return None
        by_position = set(self.positional[: len(args)])
        for name in self.sig.parameters:
            if name in by_position and name in kwargs:
                return name  # "multiple values"
            if name in self.required and name not in by_position and name not in kwargs:
                return None if name in ("self", "cls") else name  # "missing"
        if not self.var_keyword:
            return next((name for name in kwargs if name not in self.by_keyword), None)
        return None

    def given(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
        """The arguments by name, as ``Signature.bind`` would bind them; None
        when the call is not a plain one (too many, repeated, unknown or
        missing arguments: ``bind`` then words the refusal)."""
        if not self.simple or len(args) > len(self.positional):
            return None
        out = dict(zip(self.positional, args, strict=False))
        for name, value in kwargs.items():
            if name in out or (name not in self.by_keyword and not self.var_keyword):
                return None
            out[name] = value
        return out if self.required <= out.keys() else None


def arguments(sig: inspect.Signature) -> Callable[..., dict[str, Any]]:
    """``sig.bind(*args, **kwargs).arguments`` for a method made at run time
    (client mode's declared methods): a plain call bound without building a
    ``BoundArguments`` (``inspect``'s binding was a seventh of a served call's
    client CPU); any other, ``bind``'s own answer or ``TypeError``."""
    plan = _Plan(sig, {})

    def bind(*args: Any, **kwargs: Any) -> dict[str, Any]:
        # ``**settings``: bind gathers them under its name, ``given`` does not
        given = None if plan.var_keyword else plan.given(args, kwargs)
        return given if given is not None else dict(sig.bind(*args, **kwargs).arguments)

    return bind


def _checked(fn: Callable[..., Any]) -> Callable[..., Any]:
    # The signature too is worked out on the first call, not at import: the
    # handles have ~150 public methods and a CLI call uses one or two.
    state: dict[str, _Plan] = {}

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        plan = state.get("plan")
        if plan is None:
            plan = state["plan"] = _Plan(inspect.signature(fn), _hints(fn))
        given = plan.given(args, kwargs)
        if given is None:
            try:
                given = plan.sig.bind(*args, **kwargs).arguments
            except TypeError as exc:
                where = plan.culprit(args, kwargs)
                raise errors.InvalidInput(
                    f"bad call to {fn.__name__}: {exc}", **({"field": where} if where else {})
                ) from None
        checks = plan.checks
        for name, value in given.items():
            hint = checks.get(name, _UNCHECKED)
            if hint is _UNCHECKED:
                if plan.var_keyword and name not in checks:
                    _check_extra(name, value, plan.var_name)
                continue
            why = _problem(value, hint)
            if why is not None:
                raise errors.InvalidInput(f"bad {name} {_short(value)}: {why}", field=name)
        return fn(*args, **kwargs)

    return wrapper


def _binding(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a call that does not bind (a keyword it does not take, an
    argument missing) refused as ``invalid_input`` naming the argument, as
    ``checked`` does; nothing else is looked at (its own check follows)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TypeError:
            sig = inspect.signature(fn)
            try:
                sig.bind(*args, **kwargs)
            except TypeError as exc:  # said in bind's order, as culprit finds it
                where = _Plan(sig, {}).culprit(args, kwargs)
                raise errors.InvalidInput(
                    f"bad call to {fn.__name__}: {exc}", **({"field": where} if where else {})
                ) from None
            raise  # bound: the TypeError is the method's own

    return wrapper


def _check_extra(name: str, value: Any, var_name: str | None) -> None:
    """A ``**kwargs`` argument (a join field, a space setting): its types and
    bounds are the method's (strict models), its text is checked here, by the
    keyword's own name. ``Signature.bind`` hands them over as one mapping."""
    extra = value.items() if name == var_name and isinstance(value, dict) else [(name, value)]
    for key, v in extra:
        why = text_problem(key)
        if why is not None:  # the keyword itself cannot be named: the catch-all is
            where = var_name or "kwargs"
            raise errors.InvalidInput(f"bad keyword {_short(key)}: {why}", field=where)
        why = _text_inside(v)
        if why is not None:
            raise errors.InvalidInput(f"bad {key} {_short(v)}: {why}", field=key)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


F = TypeVar("F", bound=Callable[..., Any])


def self_checked(fn: F) -> F:
    """Mark a method that checks its own arguments: ``checked`` leaves it be
    (one check per call, not two)."""
    fn.__self_checked__ = True  # type: ignore[attr-defined]
    return fn


def checked(cls: C) -> C:
    """Wrap every public method defined on ``cls`` itself (class methods too).
    A method that checks its own arguments (``self_checked``: a declared
    operation's, whose input record is its one check) is only kept from
    raising Python's ``TypeError`` for a call that does not bind."""
    for name, attr in list(vars(cls).items()):
        if name.startswith("_"):
            continue
        if getattr(attr, "__self_checked__", False):
            setattr(cls, name, _binding(attr))
            continue
        if isinstance(attr, classmethod):
            setattr(cls, name, classmethod(_checked(attr.__func__)))
        elif inspect.isfunction(attr):
            setattr(cls, name, _checked(attr))
    return cls


# An ISO-8601 time as the library's ``since`` filters take it: a date, or a date
# and time (seconds and up to 6 decimals optional), in UTC (``Z`` or none) or
# with an offset.
_ISO_TIME = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?)?(?:Z|[+-]\d{2}:\d{2})?",
    re.ASCII,  # '٢٠٢٦' is not a year anybody typed
)


def utc_time(value: str, field: str = "since") -> str:
    """An ISO-8601 time (``2026-11-30``, ``2026-11-30T03:52:00Z``, with an
    offset or none: UTC) as the store writes times, ``2026-11-30T03:52:00.000000Z``,
    so it compares with them as text. Anything else is ``invalid_input``
    naming ``field``: "garbage" is not a time that matches nothing."""
    from datetime import UTC, datetime  # only for the calls that take a time

    text = value.strip()
    how = "an ISO-8601 time like 2026-11-30T03:52:00Z (UTC, or with an offset)"
    if not _ISO_TIME.fullmatch(text):
        raise errors.InvalidInput(f"bad {field} {value!r}: {how}", field=field)
    try:
        moment = datetime.fromisoformat(text.replace(" ", "T").replace("Z", "+00:00"))
        if moment.tzinfo is not None:
            moment = moment.astimezone(UTC)
    except (ValueError, OverflowError):
        raise errors.InvalidInput(f"bad {field} {value!r}: not a real time", field=field) from None
    return moment.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
