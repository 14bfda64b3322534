"""Refusals in the broker's words: pydantic's phrases, reworded (S33).

The checks at the edge not yet declared (the hand-written MCP tools' models,
``broker.frontends.mcp.inputs``) say
``String should match pattern '^[0-9A-Za-z]{26}$'``; a user should read
what the field takes. ``InvalidInput`` passes every message through
``in_words``, so each surface (library, CLI, HTTP, MCP) and every check says
the same: ``bad reply_to: a message id (26 letters and digits)``. A phrase
not listed here is left as it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# Patterns a pydantic check may say, by their text.
PATTERNS = {
    r"^[0-9A-Za-z]{26}$": "a message id (26 letters and digits)",
    r"^[\w.:#@/+-]{1,64}$": "a thread name: 1 to 64 letters, digits or _ . : # @ / + - (no spaces)",
}


def _count(what: str) -> Callable[[re.Match[str]], str]:
    def words(m: re.Match[str]) -> str:
        text = f"{m[1]} {m[2]} {what}{'' if m[2] == '1' else 's'}"
        return text + (f", not {m[3]}" if m.lastindex and m.lastindex >= 3 else "")

    return words


_RULES: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    (re.compile(r"String should have at least 1 character\b"), "not empty"),
    (re.compile(r"String should have (at most|at least) (\d+) characters?"), _count("character")),
    (
        re.compile(r"List should have (at most|at least) (\d+) items? after validation, not (\d+)"),
        _count("item"),
    ),
    (re.compile(r"Input should be a valid string"), "text"),
    (re.compile(r"Input should be a valid boolean"), "true or false"),
    (re.compile(r"Input should be a valid integer"), "a whole number"),
    (re.compile(r"Input should be a valid list"), "a list"),
    (re.compile(r"Input should be ('[^']*'(?:, '[^']*')*(?: or '[^']*')?)$"), r"one of \1"),
    (re.compile(r"Value error, "), ""),
    (re.compile(r"Field required"), "required"),
]
_PATTERN = re.compile(r"String should match pattern '(.*)'$")


def in_words(message: str) -> str:
    """``message`` with pydantic's phrases replaced by what the field takes."""
    found = _PATTERN.search(message)
    if found is not None:
        message = message[: found.start()] + PATTERNS.get(
            found.group(1), f"text matching {found.group(1)}"
        )
    for rule, words in _RULES:
        message = rule.sub(words, message)
    return message


def needs_words(message: str) -> bool:
    """Whether ``message`` may hold a phrase of pydantic's (a cheap test first)."""
    return "should" in message or "Value error, " in message or "Field required" in message
