"""The statement catalogue: every SQL statement the broker runs, once, by name.

Statements live in ``broker/store/sql/<area>.sql`` files (procrastinate-style), one
file per area of the code, loaded on first use of the area so a CLI call reads
only what it runs. A file is a sequence of entries::

    -- name: insert
    -- What it does and why (doc lines, kept on the statement).
    INSERT INTO messages (id, space_id) VALUES (:id, :space_id)
    -- postgresql:
    INSERT INTO messages (id, space_id) VALUES (:id, :space_id) ON CONFLICT DO NOTHING

A statement is addressed as ``"<area>.<name>"`` (``stmt("messages.insert")``).
Parameters are always named (``:name``); the PostgreSQL text is the one after
``-- postgresql:`` when an entry has it, else the SQLite text, with its
parameters rewritten for psycopg (``%(name)s``; the PostgreSQL text is written
with ``:name`` too and rewritten the same way). That is the only place the two
dialects' statements differ.

A column group of ``broker.store.groups`` is written as a marker, expanded
when the file is loaded: ``{mail}`` is the group's columns (``thread,
reply_to, ...``), ``{m.mail}`` the same qualified by ``m``, ``{:mail}`` their
parameters (``:thread, :reply_to, ...``). A statement that reads or writes
every attribute of a message names them once that way, so a new one is a
column and a name in the group, not an edit of each statement.

A part that statements of one area share word for word (the same rows
chosen the same way) is written once as a fragment, ``-- fragment: name``
followed by its text, and used as ``{name}`` by the statements after it. A
fragment is no statement: it is not addressed, run or EXPLAINed by itself.
A fragment may have a PostgreSQL text of its own (after ``-- postgresql:``):
a statement that differs between the dialects only there is written once,
and its PostgreSQL text is that one text with the fragment's. The fragments
of ``counters.sql`` (the space's counters, derived from the log) are every
area's: that file holds no statement, and an area may not define a fragment
of the same name.

A ``Stmt`` *is* its SQLite text (a ``str``), so the SQLite hot path hands it to
``sqlite3`` as it is; ``Tx`` picks ``.postgresql`` on the other dialect.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import cache, cached_property
from operator import itemgetter
from pathlib import Path
from typing import Any

from broker.store.groups import GROUPS

HERE = Path(__file__).parent
_NAME = re.compile(r"--\s*name:\s*([a-z0-9_]+)\s*$")
_FRAGMENT = re.compile(r"--\s*fragment:\s*([a-z0-9_]+)\s*$")
_PG = re.compile(r"--\s*postgresql:\s*$")
# A named parameter: ':name', not the second colon of a '::type' cast.
PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_QUOTED = re.compile(r"'(?:[^']|'')*'")
# A column group marker, {group}, {alias.group} or {:group} (broker.store.groups),
# or a fragment of the area, {fragment}.
_GROUP = re.compile(r"\{(:|[a-z_]\w*\.)?([a-z_]\w*)\}")
SHARED = "counters"  # the area whose fragments every area may use


class Stmt(str):
    """One catalogue statement: the SQLite text, with its name, doc and PostgreSQL text.

    ``params`` and ``postgresql`` are worked out on first use: a module's
    statements are loaded when it is imported, and on SQLite a CLI call would
    otherwise rewrite every statement of each area it touches (~2 ms) for nothing."""

    name: str
    doc: str
    _pg_source: str

    def __new__(cls, name: str, sqlite: str, postgresql: str | None = None, doc: str = "") -> Stmt:
        self = super().__new__(cls, sqlite)
        self.name = name
        self.doc = doc
        self._pg_source = postgresql if postgresql is not None else sqlite
        return self

    @cached_property
    def params(self) -> tuple[str, ...]:
        """The named parameters, in order of first use."""
        return tuple(dict.fromkeys(PARAM.findall(_QUOTED.sub("''", self))))

    @cached_property
    def numbered(self) -> tuple[str, Callable[[Mapping[str, Any]], tuple[Any, ...]]]:
        """The SQLite text with its named parameters numbered (``?1``, ``?2``
        ... in order of first use), and what takes their values from a
        mapping, in that order. ``sqlite3`` binds a tuple by position, and a
        name by a lookup with a string made anew for each parameter: a log
        row's 21 take 6.3 µs by name, 4.0 numbered."""
        number = {name: f"?{i}" for i, name in enumerate(self.params, 1)}
        text = _outside_quotes(self, lambda part: PARAM.sub(lambda p: number[p.group(1)], part))
        names = self.params
        values: Callable[[Mapping[str, Any]], tuple[Any, ...]]
        if len(names) == 1:
            (only,) = names
            values = lambda given: (given[only],)  # noqa: E731 - itemgetter of one is no tuple
        else:
            values = itemgetter(*names) if names else (lambda _given: ())
        return text, values

    @cached_property
    def postgresql(self) -> str:
        """The PostgreSQL text, parameters as psycopg takes them (``%(name)s``)."""
        return to_psycopg(self._pg_source)

    def __repr__(self) -> str:
        return f"Stmt({self.name!r})"


def to_psycopg(text: str) -> str:
    """``:name`` -> ``%(name)s`` (and a literal ``%`` doubled), outside quoted strings."""
    return _outside_quotes(
        text,
        lambda part: PARAM.sub(r"%(\1)s", part.replace("%", "%%")),
        lambda quoted: quoted.replace("%", "%%"),
    )


def _outside_quotes(
    text: str, plain: Callable[[str], str], quoted: Callable[[str], str] = str
) -> str:
    """``text`` with ``plain`` applied to each part outside its quoted strings,
    ``quoted`` to each quoted string (a parameter's name is never inside one)."""
    out: list[str] = []
    pos = 0
    for m in _QUOTED.finditer(text):
        out.append(plain(text[pos : m.start()]))
        out.append(quoted(m.group(0)))
        pos = m.end()
    out.append(plain(text[pos:]))
    return "".join(out)


class CatalogueError(Exception):
    """A malformed catalogue file (a bug in the broker, found by the tests)."""


Fragments = dict[str, tuple[str, str]]  # name -> (SQLite text, PostgreSQL text)


def parse(area: str, text: str, shared: Fragments | None = None) -> dict[str, Stmt]:
    """Parse one area file into its statements (``"<area>.<name>"`` -> ``Stmt``),
    with the ``shared`` fragments besides its own."""
    return _parse(area, text, dict(shared or {}))[0]


def _parse(area: str, text: str, fragments: Fragments) -> tuple[dict[str, Stmt], Fragments]:
    """An area's statements, and the fragments it could use (``fragments``, its own added)."""
    entries: dict[str, Stmt] = {}
    shared = set(fragments)  # a statement may share a shared fragment's name, not a fragment
    name: str | None = None
    fragment = False
    doc: list[str] = []
    body: dict[str, list[str]] = {"sqlite": [], "postgresql": []}
    part = "sqlite"

    def finish() -> None:
        if name is None:
            return
        source = _clean(body["sqlite"])
        sqlite = _expand(area, name, source, fragments, 0)
        if not sqlite:
            raise CatalogueError(f"{area}.{name}: no statement")
        if "?" in _QUOTED.sub("''", sqlite):
            raise CatalogueError(f"{area}.{name}: use named parameters (:name), not '?'")
        pg = _expand(area, name, _clean(body["postgresql"]) or source, fragments, 1)
        if fragment:
            fragments[name] = (sqlite, pg)
        else:
            stmt = Stmt(f"{area}.{name}", sqlite, None if pg == sqlite else pg, " ".join(doc))
            entries[stmt.name] = stmt

    for line in text.splitlines():
        stripped = line.strip()
        m = _NAME.fullmatch(stripped) or _FRAGMENT.fullmatch(stripped)
        if m:
            finish()
            name, doc, body, part = m.group(1), [], {"sqlite": [], "postgresql": []}, "sqlite"
            fragment = m.re is _FRAGMENT
            if f"{area}.{name}" in entries or name in fragments.keys() - (
                set() if fragment else shared
            ):
                raise CatalogueError(f"{area}.{name}: defined twice")
            continue
        if _PG.fullmatch(stripped):
            part = "postgresql"
            continue
        if stripped.startswith("--"):
            if name is not None and not body[part]:
                doc.append(stripped.lstrip("-").strip())
            continue
        if name is None:
            if stripped:
                raise CatalogueError(f"{area}: text before the first '-- name:'")
            continue
        body[part].append(line)
    finish()
    return entries, fragments


def _clean(lines: list[str]) -> str:
    """One line of SQL, no trailing semicolon: compact text for the statement cache."""
    return " ".join(" ".join(lines).split()).rstrip(";").strip()


def _expand(area: str, name: str, text: str, fragments: Fragments, dialect: int) -> str:
    """The markers of a statement replaced: a fragment by its text in the
    ``dialect`` (0 SQLite, 1 PostgreSQL), a column group by its columns."""

    def columns(m: re.Match[str]) -> str:
        prefix, group = m.group(1) or "", m.group(2)
        if not prefix and group in fragments:
            return fragments[group][dialect]
        if group not in GROUPS:
            raise CatalogueError(f"{area}.{name}: no column group or fragment {group!r}")
        return ", ".join(prefix + column for column in GROUPS[group])

    return _GROUP.sub(columns, text)


def _text(name: str) -> str:
    path = HERE / f"{name}.sql"
    if not path.is_file():
        raise CatalogueError(f"no catalogue area {name!r}")
    return path.read_text(encoding="utf-8")


@cache
def _shared() -> Fragments:
    """The fragments of ``counters.sql``, every area's."""
    entries, fragments = _parse(SHARED, _text(SHARED), {})
    if entries:
        raise CatalogueError(f"{SHARED}: holds fragments only, not {sorted(entries)}")
    return fragments


def fragment(name: str) -> str:
    """A shared fragment's text, for the SQL written outside the catalogue (the
    inspection views, ``broker.store.views``): one written for both dialects."""
    sqlite, pg = _shared()[name]
    if sqlite != pg:
        raise CatalogueError(f"{SHARED}.{name}: a text per dialect, not one for the views")
    return sqlite


@cache
def area(name: str) -> dict[str, Stmt]:
    text = _text(name)
    return parse(name, text, None if name == SHARED else _shared())


def stmt(name: str) -> Stmt:
    """The statement ``"<area>.<name>"``; a missing one fails at import of its user."""
    where, _, _ = name.partition(".")
    try:
        return area(where)[name]
    except KeyError:
        raise CatalogueError(f"no statement {name!r} in the catalogue") from None


def stmts(area: str, *names: str) -> dict[str, Stmt]:
    """The statements ``names`` of ``area``, by name (``stmts("board", "grant")["grant"]``
    is ``stmt("board.grant")``): a module's statements of an area read in one line; a
    missing one fails at import of its user, as with ``stmt``."""
    return {name: stmt(f"{area}.{name}") for name in names}


def all_statements() -> dict[str, Stmt]:
    """Every statement of every area (tests EXPLAIN them all)."""
    out: dict[str, Stmt] = {}
    for path in sorted(HERE.glob("*.sql")):
        out.update(area(path.stem))
    return out
