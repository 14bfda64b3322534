"""The plain checks of the hot path agree with the pydantic models at the edge.

(A declared operation's input record is its only check: ``msg.send``'s is
held to every surface by tests/frontends/test_surfaces.py.) ``broker.model.validate``
(the post input) and ``broker.store.settings.Limits.lenient``
(the limits in effect from a stored settings column) run without pydantic so
``broker msg send`` starts fast; ``broker.model.pydantic_inputs`` keeps the models the server,
the MCP tools and the JSON schemas use. The same input must get the same answer
from both: the same values when valid, the same one-line error when not
(S10, S33, S35).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from broker import errors
from broker.model import validate
from broker.model.pydantic_inputs import PostInput, parse_input
from broker.spaces.spaces import validate_settings
from broker.store.settings import BOUNDS, Limits
from broker.vocab import INT_SETTINGS

LONG = "x" * 401
SEND_FIELDS: dict[str, list[Any]] = {
    "to": [
        ["otter"],
        [" otter ", "lead"],
        [],
        [""],
        ["  "],
        [LONG],
        ["a"] * 64,
        ["a"] * 65,
        ["a"] * 64 + [""],
        "otter",
        [5],
        ["\ud800"],
        ("otter",),
        None,
    ],
    "text": ["hi", " padded ", "", "  \n", "\ud800", "a\ud800b", 5, None, "é ✓"],
    "idempotency_key": [None, "k", "", "k" * 200, "k" * 201, 7, "\udc00"],
    "thread": [None, "t-1", "a b", "", "t\n", "t" * 64, "t" * 65, "thé", "ü" * 3, 3],
    "reply_to": [None, "0" * 26, "abc", "0" * 25 + "!", "0" * 26 + "\n", "é" * 26],
    "importance": ["low", "normal", "high", "urgent", None, "", 1, "HIGH"],
    "ack_required": [True, False, "yes", "maybe", None, 1, 0, 2, 1.0],
}


def _answer(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        got = fn(*args)
    except errors.InvalidInput as exc:
        return "error", exc.to_dict()  # the line and its fields (S33)
    return "ok", got


def _fields(obj: Any, names: list[str]) -> dict[str, Any]:
    return {n: getattr(obj, n) for n in names}


def _agree(model: type[Any], plain: Any, data: dict[str, Any]) -> None:
    names = list(model.model_fields)
    want = _answer(parse_input, model, dict(data))
    got = _answer(plain, dict(data))
    if want[0] == "ok":
        assert got[0] == "ok", (data, got)
        assert _fields(got[1], names) == _fields(want[1], names), data
    else:
        assert got == want, data


POST_FIELDS: dict[str, list[Any]] = {
    "text": SEND_FIELDS["text"],
    "addressed_to": [[], ["otter"], [""], ["a"] * 65, None, "otter", [3]],
    "idempotency_key": SEND_FIELDS["idempotency_key"],
}


@pytest.mark.parametrize(
    "data",
    [
        dict(zip(POST_FIELDS, combo, strict=True))
        for combo in itertools.product(*POST_FIELDS.values())
    ]
    + [{"addressed_to": ["a"]}, {"text": "x", "to": ["a"]}],
)
def test_S10_S33_post_checks_agree_with_PostInput(data: dict[str, Any]) -> None:
    _agree(PostInput, validate.post_args, data)


def test_the_declared_send_check_loads_no_pydantic() -> None:
    import subprocess
    import sys

    code = (
        "import sys\nfrom broker.model.inputs import SendInput\n"
        "SendInput.parse({'to': ['a'], 'text': 'hi', 'thread': 't', 'ack_required': True})\n"
        "try:\n    SendInput.parse({'to': [], 'text': ''})\nexcept Exception:\n    pass\n"
        "print('pydantic' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- the limits in effect ----------------------------------------------------------------
def _lenient_by_model(stored: dict[str, Any]) -> Limits:
    """What Limits.lenient is by the one check of a setting (``inputs.SpaceSettings``)."""
    good: dict[str, Any] = {}
    for name, value in stored.items():
        if name not in BOUNDS:
            continue
        try:
            good[name] = validate_settings({name: value})[name]
            continue
        except errors.InvalidInput:
            pass
        low, high = BOUNDS[name]
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            continue
        if math.isnan(number) or number < low:
            continue
        number = min(number, high)
        good[name] = int(number) if name in INT_SETTINGS else number
    return Limits(**good)


VALUES: list[Any] = [
    1,
    0,
    -1,
    5,
    5.0,
    5.5,
    0.25,
    1.0,
    1.5,
    "7",
    " 8 ",
    "0.5",
    "1e3",
    "x",
    None,
    True,
    False,
    float("inf"),
    float("-inf"),
    float("nan"),
    10**12,
    2**63,
    [],
    {},
    604800,
    604801,
    1048576,
]


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_S33_lenient_limits_agree_with_the_model(name: str) -> None:
    for value in VALUES:
        got, want = Limits.lenient({name: value}), _lenient_by_model({name: value})
        assert got == want, (name, value, got, want)
        assert type(getattr(got, name)) is type(getattr(want, name)), (name, value)


def test_S33_limits_defaults_are_the_models() -> None:
    from broker.model.inputs import SpaceSettings

    assert [f.name for f in SpaceSettings.FIELDS] == list(Limits().to_dict())
    assert all(
        f.low == BOUNDS[f.name][0] and f.high == BOUNDS[f.name][1] for f in SpaceSettings.FIELDS
    )
    assert Limits.lenient({"nosuch": 1, "inbox_cap": 512}).to_dict({"inbox_cap"}) == {
        "inbox_cap": 512
    }
