"""A slurmrestd listing (`{"jobs": [...], "meta": ..., "warnings": ...}`) decoded as it arrives,
one element of its list at a time.

`json.loads` of a whole GET /jobs holds every job as nested dicts at once: 4,000 jobs (what
slurmctld keeps for MinJobAge in a busy minute) are ~70 MB of pretty-printed JSON and ~160 MB of
dicts, for a reader that keeps a few hundred bytes of each. Here only the text of the element being
decoded is held; each element is handed on and dropped. An object of the list laid out as
slurmrestd pretty-prints it is cut at its closing line and decoded by orjson; anything else by the
stdlib decoder (`JSONDecoder.raw_decode`, in C). This module only finds where elements begin (and,
pretty-printed, end) and asks for more text when one is cut off.

An answer whose whole size is known and small (`whole_listing`: a poll's jobs changed since the
last, most of the time) is decoded at once by orjson instead, at a third of the CPU: its dicts are
a bounded, small peak."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
# Text already decoded is dropped from the buffer once this much of it has piled up.
_COMPACT_AT = 1 << 16


class ListingError(ValueError):
    """The answer is not a JSON object, or is cut off."""


# The largest answer decoded whole (its dicts are ~2-3 times its JSON).
WHOLE_ANSWER_BYTES = 2 << 20


class Listing:
    """Iterate to get each element of the top-level member `key` (a list), in order; once done,
    `rest` holds the other top-level members (meta, warnings, errors), decoded whole. An answer
    with no body at all (`empty`) yields nothing."""

    def __init__(self, chunks: Iterable[str], key: str) -> None:
        self._chunks = iter(chunks)
        self._key = key
        self._buf = ""
        self._pos = 0
        self._ended = False
        self.rest: dict[str, Any] = {}
        self.empty = False
        # Where the list's objects begin, spaces after their line's start (pretty-printed), once seen.
        self._indent: int | None = None

    def __iter__(self) -> Iterator[Any]:
        if not self._skip_space():
            self.empty = True
            return
        yield from self._members()
        if self._skip_space():
            raise ListingError(f"text after the answer: {self._buf[self._pos : self._pos + 20]!r}")

    def _members(self) -> Iterator[Any]:
        self._expect("{")
        if self._at() == "}":
            self._pos += 1
            return
        while True:
            name = self._value()
            if not isinstance(name, str):
                raise ListingError("a member name is not a string")
            self._expect(":")
            if name == self._key and self._at() == "[":
                yield from self._elements()
            else:
                self.rest[name] = self._value()
            if self._at() == "}":
                self._pos += 1
                return
            self._expect(",")

    def _elements(self) -> Iterator[Any]:
        self._expect("[")
        if self._at() == "]":
            self._pos += 1
            return
        while True:
            yield self._element()
            if self._at() == "]":
                self._pos += 1
                return
            self._expect(",")

    def _element(self) -> Any:
        """The next element of the list. slurmrestd pretty-prints (the lab's 24.11 even under
        SLURMRESTD_JSON=compact): an object's closing brace is then the first line holding only it
        at the object's own indentation, since no JSON string holds a raw newline. Its text is cut
        there and decoded by orjson, at a seventh of the stdlib decoder's CPU. A cut decodes only
        if it is the whole object (a JSON object ends at its matching brace); any other cut or
        layout is read as any value is."""
        if self._at() != "{":
            return self._value()
        self._indent = _indent_before(self._buf, self._pos, self._indent)
        if self._indent is None:
            return self._value()
        closing = "\n" + " " * self._indent + "}"
        searched = 0  # how far past the element's start the closing line is known to be absent
        while (end := self._buf.find(closing, self._pos + searched)) < 0:
            searched = max(0, len(self._buf) - self._pos - len(closing))
            if not self._more(at_least=len(self._buf) - self._pos):  # may move the element to 0
                return self._value()  # cut off: says so
        end += len(closing)
        try:
            value = orjson.loads(self._buf[self._pos : end])
        except orjson.JSONDecodeError:
            return self._value()
        self._pos = end
        return value

    def _value(self) -> Any:
        """The next whole value. A value that ends exactly where the text so far ends may go on
        (a number cut in two), so more is read before taking it."""
        self._at()
        while True:
            try:
                value, end = _DECODER.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as e:
                if not self._more(at_least=len(self._buf) - self._pos):
                    raise ListingError(f"answer cut off or not JSON: {e.msg}") from e
                continue
            if end == len(self._buf) and self._more():
                continue
            self._pos = end
            return value

    def _at(self) -> str:
        """The next character that is not white space (the buffer is read up to it)."""
        if not self._skip_space():
            raise ListingError("answer cut off")
        return self._buf[self._pos]

    def _expect(self, char: str) -> None:
        if self._at() != char:
            raise ListingError(f"expected {char!r} at {self._buf[self._pos : self._pos + 20]!r}")
        self._pos += 1

    def _skip_space(self) -> bool:
        """Move past white space; False when the text ends first."""
        while True:
            self._pos = _SPACE.match(self._buf, self._pos).end()  # type: ignore[union-attr]
            if self._pos < len(self._buf):
                return True
            if not self._more():
                return False

    def _more(self, at_least: int = 1) -> bool:
        """Append chunks, `at_least` characters of them (dropping what is decoded already); False
        when none came. A value cut off is decoded again from its start: asking for as much again
        as was tried keeps that linear in its size (a chunk at a time, a 30 kB job read in 4 kB
        chunks was decoded eight times, most of the syncer's CPU in a burst: issue 40)."""
        if self._ended:
            return False
        got = 0
        for chunk in self._chunks:
            if not chunk:
                continue
            if self._pos >= _COMPACT_AT:
                self._buf, self._pos = self._buf[self._pos :], 0
            self._buf += chunk
            got += len(chunk)
            if got >= at_least:
                return True
        self._ended = True
        return got > 0


def _indent_before(text: str, at: int, known: int | None) -> int | None:
    """The spaces between the start of `at`'s line and `at`; `known` when the line's start is not
    in `text` (dropped as decoded already), None when `at` does not begin its line's text."""
    start = at
    while start > 0 and text[start - 1] == " ":
        start -= 1
    if start == 0:
        return known
    return at - start if text[start - 1] == "\n" else None


class WholeListing:
    """A listing whose body was read whole: the same reading as `Listing` (its elements, then
    `rest`, `empty`), decoded at once."""

    def __init__(self, body: bytes, key: str) -> None:
        self._body = body
        self._key = key
        self.rest: dict[str, Any] = {}
        self.empty = False

    def __iter__(self) -> Iterator[Any]:
        if not self._body.strip():
            self.empty = True
            return
        try:
            answer = orjson.loads(self._body)
        except orjson.JSONDecodeError as e:
            raise ListingError(f"answer cut off or not JSON: {e}") from e
        self._body = b""
        if not isinstance(answer, dict):
            raise ListingError("the answer is not a JSON object")
        elements = answer.pop(self._key, None)
        self.rest = answer
        if elements is None:
            return
        if not isinstance(elements, list):
            self.rest[self._key] = elements
            return
        yield from elements
