"""Refusals in the broker's words: pydantic's phrases, reworded (S33).

The checks at the edge (``broker.models``, and ``broker.validate``'s plain
twin of them, which words its refusals exactly as pydantic would) say
``String should match pattern '^[0-9A-Za-z]{26}$'``; a user should read
what the field takes. ``InvalidInput`` passes every message through
``in_words``, so each surface (library, CLI, HTTP, MCP) and both checks say
the same: ``bad reply_to: a message id (26 letters and digits)``. A phrase
not listed here is left as it is.
"""

from __future__ import annotations

import re

# The patterns of broker.models (and broker.validate), by their text.
PATTERNS = {
    r"^[0-9A-Za-z]{26}$": "a message id (26 letters and digits)",
    r"^[\w.:#@/+-]{1,64}$": "a thread name: 1 to 64 letters, digits or . : # @ / + - (no spaces)",
}
_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"String should have at least 1 character\b"), "not empty"),
    (re.compile(r"String should have (at most|at least) (\d+) characters?"), r"\1 \2 characters"),
    (
        re.compile(r"List should have (at most|at least) (\d+) items? after validation, not (\d+)"),
        r"\1 \2 items, not \3",
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
        words = PATTERNS.get(found.group(1), f"text matching {found.group(1)}")
        message = message[: found.start()] + words
    for rule, words in _RULES:
        message = rule.sub(words, message)
    return message


def needs_words(message: str) -> bool:
    """Whether ``message`` may hold a phrase of pydantic's (a cheap test first)."""
    return "should" in message or "Value error, " in message or "Field required" in message
