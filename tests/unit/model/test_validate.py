"""The plain checks of the hot path agree with the one check of their inputs.

(A declared operation's input record is its only check, held to every surface
by tests/frontends/test_surfaces.py.) ``broker.store.settings.Limits.lenient``
(the limits in effect from a stored settings column) runs without the input
records so a send starts fast; the same stored value must give the same limit
as the record's check of a setting (``inputs.SpaceSettings``) would (S33).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from broker import errors
from broker.spaces.spaces import validate_settings
from broker.store.settings import BOUNDS, Limits
from broker.vocab import INT_SETTINGS


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
