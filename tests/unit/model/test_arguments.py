"""``typecheck.arguments``: a run-time method's arguments by name, as
``inspect.Signature.bind`` gives them, for every call (client mode's declared
methods bind each call with it)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from broker.api.operations import OPERATIONS
from broker.model.typecheck import arguments


def _bound(sig: inspect.Signature, *args: Any, **kwargs: Any) -> Any:
    try:
        return dict(sig.bind(*args, **kwargs).arguments)
    except TypeError as exc:
        return ("TypeError", str(exc))


def _ours(sig: inspect.Signature, *args: Any, **kwargs: Any) -> Any:
    try:
        return arguments(sig)(*args, **kwargs)
    except TypeError as exc:
        return ("TypeError", str(exc))


CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((), {}),
    (("a",), {}),
    (("a", "b"), {}),
    (("a", "b", "c", "d", "e", "f", "g", "h"), {}),  # too many
    (("a",), {"to": "again"}),  # given twice when the first is "to"
    ((), {"to": "x", "text": "y"}),
    ((), {"nosuch": 1}),
    ((), {"limit": 3, "wait": 0.5}),
    ((), {"kind": "session", "inbox_cap": 5}),  # a setting of **settings
]


@pytest.mark.parametrize(
    "op", [op for op in OPERATIONS if op.http is not None], ids=lambda o: o.name
)
def test_every_declared_signature_binds_every_call_as_inspect_does(op: Any) -> None:
    sig = op.signature()
    for args, kwargs in CALLS:
        assert _ours(sig, *args, **kwargs) == _bound(sig, *args, **kwargs), (op.name, args, kwargs)
