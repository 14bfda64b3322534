"""The columns that mean the same in every table, each declared once: a row's
ULID, its space, a participant, a time, a counter, a JSON list, a choice from a
vocabulary; and the sizes of ids and times. The table modules call them as
``column.utc("at_utc")``."""

from __future__ import annotations

from sqlalchemy import Column, ForeignKey, Integer, String, Text

ID = 26  # ULID length
TS = 27  # len("2026-11-30T02:54:03.123456Z")
SPACE_ID = 40  # spaces.id: a kind prefix + ULID (af_…, ses_…), with room


def ulid_key(comment: str | None = None) -> Column[str]:
    """``id``: the row's ULID, its primary key (time-ordered, so it breaks ties
    between rows of the same time)."""
    return Column("id", String(ID), primary_key=True, comment=comment)


def space_ref(
    *, primary_key: bool = False, foreign_key: bool = True, comment: str | None = None
) -> Column[str]:
    """``space_id``: the space the row belongs to. Without ``foreign_key`` for the
    rows that outlive their space or go with it by a trigger (``comment`` says which)."""
    keys = [ForeignKey("spaces.id")] if foreign_key else []
    return Column(
        "space_id",
        String(SPACE_ID),
        *keys,
        primary_key=primary_key,
        nullable=False,
        comment=comment,
    )


def participant_ref(name: str = "participant_id") -> Column[str]:
    """A participant of the row's space, by its id."""
    return Column(name, String(ID), ForeignKey("participants.id"), nullable=False)


def utc(name: str, *, nullable: bool = False, comment: str | None = None) -> Column[str]:
    """A time: fixed-width ISO-8601 UTC text with microseconds, so it sorts as time."""
    return Column(name, String(TS), nullable=nullable, comment=comment)


def counter(name: str, comment: str | None = None) -> Column[int]:
    """A number that starts at zero and grows: a count, or how far along (a
    sequence, a cursor)."""
    return Column(name, Integer, nullable=False, server_default="0", comment=comment)


def json_list(name: str, comment: str) -> Column[str]:
    """A JSON list, as text (portable across SQLite and PostgreSQL); empty at first."""
    return Column(name, Text, nullable=False, server_default="[]", comment=comment)


def choice(name: str, values: tuple[str, ...], *, default: str | None = None) -> Column[str]:
    """One of ``values`` (a vocabulary), which its comment lists; the table's
    ``base.one_of`` CHECK holds a column of broker.vocab to them."""
    return Column(
        name, String(16), nullable=False, server_default=default, comment=" | ".join(values)
    )
