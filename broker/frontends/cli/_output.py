"""What the CLI prints: safe text for people (S31), exact JSON for machines.

Every human view goes through ``safe``/``block`` here, so no agent-supplied
text (bodies, addresses, names, roles, reasons, keys, error messages that
quote them) can reach a terminal as a control sequence: it could clear the
screen, retitle the window, write the clipboard (OSC 52) or forge an output
line. ``--json`` keeps the exact text; only characters a terminal could act on
are written as JSON ``\\u`` escapes, which decode to the same string.

Output contract: a list prints one JSON object per line (JSON Lines), a single
result one object; tables fit the terminal (80 columns when it is not one).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

import click

from broker import errors
from broker.vocab import ascii_digits

if TYPE_CHECKING:
    from broker.model.records import SendResult

T = TypeVar("T")

# Characters a terminal acts on, or that reorder what a person sees:
# C0 controls, DEL, C1 controls (0x80-0x9f: 0x9b is a one-byte CSI), the bidi
# embeddings/overrides/isolates (U+202E turns text around), and the Unicode
# line and paragraph separators.
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_DANGEROUS = (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), *_BIDI, 0x2028, 0x2029)
_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}


def _escape(cp: int) -> str:
    if cp in _NAMED:
        return _NAMED[cp]
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}"


@cache
def _tables() -> tuple[dict[int, str], dict[int, str], dict[int, str]]:
    """The translation tables, built on first need (most text is plain ASCII
    and never needs them; CLI start-up is an agent's latency)."""
    # One line: every dangerous character escaped, line breaks and tabs included.
    one_line = {cp: _escape(cp) for cp in _DANGEROUS}
    # A block of lines (a message body shown under its header): line breaks
    # and tabs stay, everything else is escaped (CR could overwrite a line).
    block_ = {cp: v for cp, v in one_line.items() if cp not in (0x09, 0x0A)}
    # JSON: the same characters as \\u escapes (json.dumps already escapes C0).
    json_ = {cp: f"\\u{cp:04x}" for cp in _DANGEROUS if cp >= 0x7F}
    return one_line, block_, json_


def safe(value: object) -> str:
    """``value`` as one line of text a terminal prints literally (S31)."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    if text.isascii() and text.isprintable():
        return text  # the common case, without building a new string
    return _surrogates_escaped(text).translate(_tables()[0])


def block(value: object, indent: str = "") -> str:
    """Multi-line text a terminal prints literally; each line after ``indent``
    (so a body cannot forge a line that looks like the broker's own)."""
    text = _surrogates_escaped("" if value is None else str(value)).translate(_tables()[1])
    if not indent:
        return text
    return "\n".join(indent + line for line in text.split("\n"))


def _surrogates_escaped(text: str) -> str:
    # A lone surrogate cannot be encoded for the terminal at all (S33 keeps
    # them out of the store; this keeps a stray one from crashing a view).
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def dumps(data: Any) -> str:
    """One JSON document on one line, exact text, terminal-safe bytes."""
    import json

    out = json.dumps(data, ensure_ascii=False)
    if out.isascii():
        return out
    return _surrogates_json(out).translate(_tables()[2])


def _surrogates_json(out: str) -> str:
    try:
        out.encode("utf-8")
    except UnicodeEncodeError:
        return "".join(f"\\u{ord(c):04x}" if 0xD800 <= ord(c) <= 0xDFFF else c for c in out)
    return out


def emit_json(data: Any) -> None:
    """A single result: one object."""
    click.echo(dumps(to_jsonable(data)))


def emit(data: Any, as_json: bool, text: str) -> None:
    """A single result: its JSON object (``--json``), else ``text``, one line for people."""
    click.echo(dumps(to_jsonable(data)) if as_json else text)


def emit_lines(items: Sequence[T], as_json: bool, line: Callable[[T], str]) -> None:
    """A list: one JSON object per item (``--json``), else one line for people per item;
    nothing for an empty list."""
    if as_json:
        emit_json_lines(items)
    elif items:
        click.echo("\n".join(line(item) for item in items))


def emit_json_lines(items: Iterable[Any]) -> None:
    """A list: one object per line (JSON Lines); nothing for an empty list."""
    for item in items:
        click.echo(dumps(to_jsonable(item)))


def to_jsonable(data: Any) -> Any:
    """Records (broker.model.records) and models as JSON-ready values, field names as
    the records name them."""
    if hasattr(type(data), "__dataclass_fields__"):
        from broker.model.records import to_dict

        return to_dict(data)
    if hasattr(data, "model_dump"):  # a pydantic model (not imported here: start-up time)
        return data.model_dump(mode="json", by_alias=True)
    if isinstance(data, list | tuple):
        return [to_jsonable(d) for d in data]
    if isinstance(data, dict):
        return {k: to_jsonable(v) for k, v in data.items()}
    return data


# --- human views --------------------------------------------------------------------------
def when(ts: str | None) -> str:
    """A stored UTC timestamp for a table: to the second (JSON keeps it whole)."""
    if not ts:
        return ""
    return ts[:19].replace("T", " ")


def width() -> int:
    """The terminal's width, or 80 when output is not a terminal (COLUMNS wins).
    (What shutil.get_terminal_size does, without importing shutil: bz2, lzma.)"""
    columns = os.environ.get("COLUMNS", "")
    if ascii_digits(columns) and int(columns) > 0:
        return max(40, int(columns))
    try:
        columns_now = os.get_terminal_size(1).columns
    except OSError:
        columns_now = 0
    return max(40, columns_now or 80)


# Column headers of identifiers (see ``table``).
IDENTIFIERS = frozenset(
    {"address", "agent", "participant", "holder", "owner", "sender", "inbox", "parent", "key",
     "pattern", "path", "id", "delivery", "fence", "thread", "setting"}
)  # fmt: skip


def table(
    rows: Sequence[Sequence[Any]],
    headers: Sequence[str],
    *,
    shrink: Iterable[int] = (),
    empty: str = "(none)",
) -> None:
    """An aligned table whose every cell is safe text. When it is wider than
    the terminal, the ``shrink`` columns give way, widest first, and their
    cells end in '…'. Only free text shrinks (roles, reasons, errors): an
    identifier (an address, a name, a key, a pattern, a path, an id) is what
    the reader types next, so it stays whole, even past the terminal's width."""
    if not rows:
        click.echo(empty)
        return
    shrink = [i for i in shrink if headers[i] not in IDENTIFIERS]  # whatever a caller asked
    cells = [[safe(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    floor = {i: max(len(headers[i]), 8) for i in shrink}
    while sum(widths) + 2 * (len(widths) - 1) > width():
        candidates = [i for i in floor if widths[i] > floor[i]]
        if not candidates:
            break
        widest = max(candidates, key=lambda i: widths[i])
        over = sum(widths) + 2 * (len(widths) - 1) - width()
        widths[widest] = max(floor[widest], widths[widest] - over)
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True))]
    for r in cells:
        lines.append("  ".join(_fit(c, w).ljust(w) for c, w in zip(r, widths, strict=True)))
    click.echo("\n".join(line.rstrip() for line in lines))


def _fit(cell: str, w: int) -> str:
    return cell if len(cell) <= w else cell[: w - 1] + "…"


def keyvals(pairs: Sequence[tuple[str, Any]]) -> None:
    """``key  value`` lines, values safe."""
    w = max(len(k) for k, _ in pairs)
    click.echo("\n".join(f"{k.ljust(w)}  {safe(v)}".rstrip() for k, v in pairs))


# --- a send's outcome (msg send, board post|directive): here, so that the board's
# commands do not load the message commands' module
def print_result(result: SendResult | dict[str, Any], as_json: bool) -> None:
    """A send's outcome: who it reached, and why not for each it did not (S7).
    ``result`` is the record, or its dict as ``NotDelivered`` carries it."""
    data = result if isinstance(result, dict) else to_jsonable(result)
    if as_json:
        emit_json(data)
        return
    line = f"{data['id']} seq {data['seq']}"
    if data["reached"]:
        line += f": delivered to {safe(', '.join(data['reached']))}"
    click.echo(line + (" (duplicate: nothing new written)" if data.get("duplicate") else ""))
    for nr in data["not_reached"]:
        click.echo(f"not delivered to {safe(nr['address'])}: {safe(nr['reason'])}")


def run_send(fn: Callable[[], SendResult], as_json: bool) -> None:
    """Print the outcome; a send that reached nobody prints it too, then exits 1 (S8)."""
    try:
        result = fn()
    except errors.NotDelivered as exc:
        print_result(exc.fields["result"], as_json)
        raise click.exceptions.Exit(exc.exit_code) from None
    print_result(result, as_json)


TO_HELP = "Address, role:NAME, step:NAME, parent, lead, operator or broadcast (repeatable)."
