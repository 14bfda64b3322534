"""Two declarations of an input record (``broker.model.fields``): a list of
records (``fields.items``: a send-many's messages) and fields of which at most
one may be given (``Input.ONE_OF``: two cursors). Every surface takes both from
the record (tests/frontends/test_surfaces.py runs them there); here, the rule
itself and its JSON Schema."""

from __future__ import annotations

from typing import Any

import pytest

from broker import errors
from broker.model import fields
from broker.model.fields import Input
from broker.model.inputs import MessagesInput, SendInput, SendManyInput


def refusal(record: type[Input], data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    with pytest.raises(errors.InvalidInput) as info:
        record.parse(data)
    return info.value.message, info.value.fields


def test_each_item_is_checked_by_its_record_and_kept_as_one() -> None:
    inp = SendManyInput.parse({"items": [{"to": "a", "text": "x"}, {"to": ["b"], "text": "y"}]})
    assert [type(i) for i in inp.items] == [SendInput, SendInput]
    assert [i.to for i in inp.items] == [["a"], ["b"]]
    # as JSON carries it (the remote client's body): each item its fields by name
    assert inp.values()["items"][1] == SendInput.parse({"to": "b", "text": "y"}).values()
    assert SendManyInput.parse(inp.values()) == inp


@pytest.mark.parametrize(
    ("items", "said", "field"),
    [
        ([{"to": "a", "text": "ok"}, {"to": "a", "text": " "}],
         "bad items[1].text: message text is empty", "items[1].text"),
        ([{"to": "a", "text": "x", "from": "b"}],
         "unknown field 'items[0].from': this tool does not take it", "items[0].from"),
        ([{"text": "x"}], "bad items[0].to: required", "items[0].to"),
        ([{"to": ["a", ""], "text": "x"}], "bad items[0].to.1: not empty", "items[0].to"),
        (["x"], "bad items[0]: fields by name, not text", "items[0]"),
        ("x", "bad items: a list, not text", "items"),
        ([{"to": "a", "text": "x"}] * 1001, "bad items: at most 1000 items, not 1001", "items"),
    ],
)  # fmt: skip
def test_a_refused_item_is_named_with_its_field(items: Any, said: str, field: str) -> None:
    message, named = refusal(SendManyInput, {"items": items})
    assert (message, named["field"]) == (said, field)
    if field.startswith("items["):
        assert named["item"] == int(field[6])


def test_a_list_of_records_is_an_array_of_the_records_schema() -> None:
    schema = SendManyInput.schema()["properties"]["items"]
    assert schema["type"] == "array" and schema["maxItems"] == 1000
    assert schema["items"] == SendInput.schema()
    assert schema["items"]["additionalProperties"] is False


@pytest.mark.parametrize(
    ("data", "said", "field"),
    [
        ({"after": "x", "after_seq": 1}, "after and after_seq exclude each other", "after_seq"),
        ({"limit": 3, "tail": 3}, "limit and tail exclude each other", "tail"),
    ],
)
def test_at_most_one_of_a_group_is_given(data: dict[str, Any], said: str, field: str) -> None:
    message, named = refusal(MessagesInput, {"space": "s", **data})
    assert (message, named["field"]) == (said, field)


def test_one_of_a_group_alone_and_none_are_taken() -> None:
    assert MessagesInput.parse({"space": "s", "after_seq": 3, "tail": 2}).after_seq == 3
    assert MessagesInput.parse({"space": "s", "after": None, "after_seq": 3}).after_seq == 3
    assert MessagesInput.parse({"space": "s"}).limit is None


def test_a_group_naming_no_field_is_a_declaration_error() -> None:
    with pytest.raises(TypeError, match="ONE_OF"):

        class Broken(Input):
            ONE_OF = (("a", "nosuch"),)
            a: int | None = fields.whole("a", default=None)
