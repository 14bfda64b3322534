"""Every field of every import line checked at the edge (S33).

A line is strict JSON (no ``NaN``/``Infinity``), UTF-8, an object with exactly
the spec's keys. Each value is checked against its ``Field``: text is valid
UTF-8 with no lone surrogates and within the column's length, integers are
within SQLite's 64-bit range and the field's lower bound, times are real
fixed-width UTC times, ids are ULIDs, enumerations hold one of their values,
JSON lists hold what they should, and space settings go through
``broker.spaces.spaces.validate_settings`` (so an imported space is usable: a send
never meets a setting it cannot read). The first problem is raised as a
``BadLine`` naming the field.
"""

from __future__ import annotations

import calendar
import json
import math
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from broker import errors
from broker.interchange.export.lines import (
    ADDRESS,
    BOOL,
    ID,
    INT,
    INT64,
    LIST,
    REASONS,
    SETTINGS,
    TEXT,
    TIME,
    Field,
    Spec,
)
from broker.interchange.importer.report import BadLine
from broker.model.bounds import text_flaw
from broker.spaces import addressing

TIME_RE = re.compile(
    r"(\d{4})-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d\.\d{6}Z"
)
ID_RE = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")
SPACE_ID = re.compile(r"[a-z0-9_]{1,40}")
# A raw line that may hold a surrogate escape (\ud800-\udfff) or a NUL one
# (\u0000, which PostgreSQL's text cannot hold): only such lines need the slower
# walk over their strings. (A raw NUL byte is not JSON: the decoder refuses it.)
_SURROGATE_ESCAPE = re.compile(rb"\\u(?:[dD][89abcdefABCDEF]|0000)")
MAX_ADDRESS = 200
MAX_TO = 400


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# One decoder for every line (json.loads with an option builds one per call).
_DECODE = json.JSONDecoder(parse_constant=_refuse_constant).decode


def parse_line(raw: bytes) -> dict[str, Any]:
    """One JSONL line as an object; ``BadLine`` if it is not UTF-8, strict JSON,
    an object, or holds a lone surrogate."""
    try:
        obj = _DECODE(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadLine("not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise BadLine(f"not JSON: {exc.msg} (column {exc.colno})") from None
    except ValueError as exc:  # NaN/Infinity, an integer of thousands of digits
        raise BadLine(f"not JSON: {exc}") from None
    except RecursionError:
        raise BadLine("not JSON: nested too deeply") from None
    if not isinstance(obj, dict):
        raise BadLine("not a JSON object")
    if _SURROGATE_ESCAPE.search(raw):
        found = _bad_text_in(obj)
        if found is not None:
            where, flaw = found
            if flaw == "a lone surrogate":
                raise BadLine(f"{where} is not valid UTF-8 text (a lone surrogate)")
            raise BadLine(f"{where} is not text a store can hold ({flaw})")
    return obj


def _bad_text_in(value: Any, path: str = "") -> tuple[str, str] | None:
    """The first place in ``value`` holding text that cannot be stored (a lone
    surrogate, a NUL: ``bounds.text_flaw``), and what is wrong with it."""
    if isinstance(value, str):
        flaw = text_flaw(value)
        return None if flaw is None else (path or "the line", flaw)
    if isinstance(value, dict):
        for k, v in value.items():
            found = _bad_text_in(k, f"{path} key" if path else "a key") or _bad_text_in(
                v, f"{path}.{k}" if path else str(k)
            )
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _bad_text_in(v, f"{path}[{i}]")
            if found:
                return found
    return None


normal_address = addressing.normal_address  # the mail importer reads From with it


# --- one checker per field type -------------------------------------------------------
def _text(f: Field, v: Any) -> Any:
    if type(v) is not str:
        raise BadLine(f"{f.name} must be a string")
    if f.max_len is not None and len(v) > f.max_len:
        raise BadLine(f"{f.name} is longer than {f.max_len} characters")
    if f.choices and v not in f.choices:
        raise BadLine(f"{f.name} must be one of {', '.join(f.choices)}, not {v!r}")
    return v


def _address(f: Field, v: Any) -> Any:
    if type(v) is not str or not v:
        raise BadLine(f"{f.name} must be a non-empty string")
    if len(v) > MAX_ADDRESS:
        raise BadLine(f"{f.name} is longer than {MAX_ADDRESS} characters")
    return v


def _id(f: Field, v: Any) -> Any:
    if type(v) is not str or not ID_RE.fullmatch(v):
        raise BadLine(f"{f.name} must be a ULID (26 characters of Crockford base32)")
    return v


def is_time(v: Any) -> bool:
    """A real fixed-width UTC time (``2026-01-31T12:00:00.000000Z``; no 30 February)."""
    m = TIME_RE.fullmatch(v) if type(v) is str else None
    if m is None:
        return False
    day = int(m.group(3))
    return day <= 28 or day <= calendar.monthrange(int(m.group(1)), int(m.group(2)))[1]


def _time(f: Field, v: Any) -> Any:
    if not is_time(v):
        raise BadLine(f"{f.name} must be a UTC time like 2026-01-31T12:00:00.000000Z")
    return v


def _int(f: Field, v: Any) -> Any:
    if type(v) is not int:
        raise BadLine(f"{f.name} must be an integer")
    if not f.low <= v <= INT64[1]:
        raise BadLine(f"{f.name} must be between {f.low} and {INT64[1]}, not {v}")
    return v


def _bool(f: Field, v: Any) -> Any:
    if type(v) is not bool:
        raise BadLine(f"{f.name} must be true or false")
    return int(v)


def _list(f: Field, v: Any) -> Any:
    if type(v) is not list:
        raise BadLine(f"{f.name} must be a list")
    if not v:
        return "[]"  # most lists of a log are empty: skip the encoder
    for item in v:
        if type(item) is not str or not item or len(item) > MAX_TO:
            raise BadLine(f"{f.name} must hold non-empty strings of at most {MAX_TO} characters")
    return json.dumps(v)


def _reasons(f: Field, v: Any) -> Any:
    if type(v) is not list or not all(
        type(n) is dict
        and set(n) == {"address", "reason"}
        and type(n["address"]) is str
        and type(n["reason"]) is str
        for n in v
    ):
        raise BadLine(f"{f.name} must hold {{address, reason}} objects")
    return json.dumps(v) if v else "[]"


def _settings(f: Field, v: Any) -> Any:
    if type(v) is not dict:
        raise BadLine(f"{f.name} must be an object")
    _plain_numbers(f.name, v)
    from broker.spaces.spaces import validate_settings

    try:
        normal = validate_settings(v)
    except errors.InvalidInput as exc:
        raise BadLine(f"{f.name}: {exc.message}") from None
    return json.dumps(normal, sort_keys=True)


def _plain_numbers(name: str, value: Any) -> None:
    """Numbers inside a JSON value: finite, integers within SQLite's range."""
    if type(value) is int and not INT64[0] <= value <= INT64[1]:
        raise BadLine(f"{name} holds an integer outside SQLite's 64-bit range")
    if type(value) is float and not math.isfinite(value):
        raise BadLine(f"{name} holds a number that is not finite")
    if isinstance(value, dict):
        for k, v in value.items():
            _plain_numbers(f"{name}.{k}", v)
    elif isinstance(value, list):
        for v in value:
            _plain_numbers(name, v)


_CHECK: dict[str, Callable[[Field, Any], Any]] = {
    TEXT: _text,
    ADDRESS: _address,
    ID: _id,
    TIME: _time,
    INT: _int,
    BOOL: _bool,
    LIST: _list,
    REASONS: _reasons,
    SETTINGS: _settings,
}


_Plan = tuple[tuple[str, str, bool, Callable[[Field, Any], Any], Field], ...]
_PLANS: dict[int, _Plan] = {}


def _plan(spec: Spec) -> _Plan:
    """How to check a spec's imported fields, worked out once per spec."""
    plan = _PLANS.get(id(spec))
    if plan is None:
        plan = _PLANS[id(spec)] = tuple(
            (f.name, f.column, f.null, _CHECK[f.type], f) for f in spec.imported
        )
    return plan


def check(spec: Spec, obj: dict[str, Any]) -> dict[str, Any]:
    """The column values of one line (imported fields, keyed by column); raises
    ``BadLine`` naming the first problem. Derived fields must be present and are
    ignored."""
    if len(obj) != len(spec.names) or not spec.name_set.issuperset(obj):
        for key in obj:
            if key not in spec.name_set:
                raise BadLine(f"unknown field {key!r}")
        for name in spec.names:
            if name not in obj and not spec.by_name[name].added:
                raise BadLine(f"missing field {name!r}")
    values: dict[str, Any] = {}
    for name, column, nullable, checker, f in _plan(spec):
        v = obj.get(name)
        if v is None:
            if not nullable:
                raise BadLine(f"{name} must not be null")
            values[column] = None
        else:
            values[column] = checker(f, v)
    return values


def check_message(values: dict[str, Any]) -> None:
    """A log line's fields agree with each other: only the operator's rows
    are kind ``operator``, urgent, or carry an operator surface (S29); the
    operator writes kind ``operator``, and ``retract`` when it lifts a
    directive (S9)."""
    operator_kind = values["kind"] == "operator"
    by_operator = values["sender"] == "operator"
    if operator_kind and not by_operator:
        raise BadLine("kind 'operator' goes with sender 'operator', and only with it")
    if by_operator and values["kind"] not in ("operator", "retract"):
        raise BadLine("sender 'operator' goes with kind 'operator' or 'retract' only")
    if values["urgent"] and not operator_kind:
        raise BadLine("only an operator message can be urgent")
    if values["via"] is not None and not by_operator:
        raise BadLine("via names an operator surface: only the operator's rows have one")
    if values["recipients"] != "[]":
        for form in json.loads(values["recipients"]):
            problem = _form_problem(form)
            if problem:
                # Turns parse a directive's forms every turn: one that cannot
                # parse would break every turn of the space, not just this line.
                raise BadLine(f"to: {problem}")


@lru_cache(maxsize=4096)  # a log repeats a few forms many times
def _form_problem(form: str) -> str | None:
    """Why a ``to`` form is not one a send accepts (S6), or None."""
    try:
        addressing.parse_target(form)
    except errors.InvalidInput as exc:
        return exc.message
    return None


def check_participant_address(address: str) -> None:
    """No participant may hold an address that reads as a reserved word (S3,
    S29), as no join can make one; ``lead`` itself is the lead's (S3)."""
    if address != "lead" and addressing.reads_reserved(address):
        raise BadLine(f"address {address!r} is reserved: no participant can hold it")


def check_mailbox_address(address: str) -> None:
    """A file mailbox's folder or directory entry names its participant: it must
    be an address a join gives (S3), so a folder name from another tool cannot
    bring in one a join refuses (a terminal escape, a space, a ``role:`` form
    no ``to`` can reach). The JSONL layout is the broker's own log and
    restores its addresses as they were, held only to the reserved names."""
    check_participant_address(address)
    if not addressing.is_address(address):
        raise BadLine(
            f"address {address!r} is not one a join gives: segments of letters, digits, "
            "'_', '.', '-' with an optional #N, joined by '>'"
        )
