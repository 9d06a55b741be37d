"""Whether text streamed so far can still become one JSON object.

A chat model's tool-call arguments arrive as string pieces and are relayed to an Anthropic
client as ``input_json_delta`` events, which its SDKs parse as they come (partially): a
piece that makes the arguments something no JSON object starts with (a weak model's
``{'path': ...}``, ``null``, a list, a lone surrogate escape) raises in the client. The
checker reads the pieces once, in order, and says when that happens, so what was relayed
stays a valid object prefix.
"""

from __future__ import annotations

import re

_STRING_RUN = re.compile(r'[^"\\\x00-\x1f]*')
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_LITERALS = ("true", "false", "null")
_ESCAPES = frozenset('"\\/bfnrtu')
_HEX = frozenset("0123456789abcdefABCDEF")

# What the next character may start: a value (or "]" right after "["), a key (or "}" right
# after "{"), ":", "," (or the container's end), only whitespace (the object ended).
_VALUE, _VALUE_OR_END, _KEY_OR_END, _KEY, _COLON, _NEXT, _DONE = range(7)


class ObjectPrefix:
    """Feed pieces with :meth:`feed`; False once the text fed so far is no prefix of a
    JSON object (and from then on)."""

    def __init__(self) -> None:
        self.ok = True
        self._stack: list[str] = []
        self._expect = _VALUE
        self._string = False  # inside a string (a key when ``_key``)
        self._key = False
        self._escape = ""  # the escape read so far ("\\", "\\u12"...)
        self._high = False  # a high surrogate escape was read: a low one must follow
        self._token = ""  # a number or literal not ended yet

    def feed(self, text: str) -> bool:
        """Read ``text``; whether everything fed so far can still be an object's start."""
        i, n = 0, len(text)
        while self.ok and i < n:
            if self._string:
                i = self._in_string(text, i)
                continue
            c = text[i]
            if self._token:
                if c.isalnum() or c in "+-.":
                    self._token += c
                    self.ok = self._token_prefix()
                    i += 1
                    continue
                self.ok = self._token_done()
                self._token = ""
                continue
            i += 1
            if c in " \t\r\n":
                continue
            self.ok = self._structural(c)
        return self.ok

    def _structural(self, c: str) -> bool:
        expect = self._expect
        if expect == _DONE:
            return False
        if not self._stack and expect == _VALUE and c != "{":  # the whole: an object
            return False
        if expect in (_KEY, _KEY_OR_END):
            if c == "}" and expect == _KEY_OR_END:
                return self._close("{")
            if c != '"':
                return False
            self._string = self._key = True
            return True
        if expect == _COLON:
            if c != ":":
                return False
            self._expect = _VALUE
            return True
        if expect == _NEXT:
            top = self._stack[-1]
            if c == ",":
                self._expect = _KEY if top == "{" else _VALUE
                return True
            return c in "}]" and self._close("{" if c == "}" else "[")
        # a value
        if c in "{[":
            self._stack.append(c)
            self._expect = _KEY_OR_END if c == "{" else _VALUE_OR_END
            return True
        if c == "]" and expect == _VALUE_OR_END:  # an empty list
            return self._close("[")
        if c == '"':
            self._string, self._key = True, False
            return True
        if c == "-" or c.isdigit() or c in "tfn":
            self._token = c
            return self._token_prefix()
        return False

    def _close(self, opener: str) -> bool:
        if not self._stack or self._stack[-1] != opener:
            return False
        self._stack.pop()
        self._value_done()
        return True

    def _value_done(self) -> None:
        self._expect = _NEXT if self._stack else _DONE

    def _in_string(self, text: str, i: int) -> int:
        if self._escape:
            c = text[i]
            self._escape += c
            if len(self._escape) == 2:
                if c not in _ESCAPES or (self._high and c != "u"):
                    self.ok = False
            elif c not in _HEX:
                self.ok = False
            if self.ok and (len(self._escape) == 6 or self._escape[1] != "u"):
                self._surrogate(self._escape)
                self._escape = ""
            return i + 1
        if self._high and text[i] != "\\":  # a high surrogate escape: a low one next
            self.ok = False
            return i
        end = _STRING_RUN.match(text, i).end()  # type: ignore[union-attr]
        if end < len(text):
            c = text[end]
            if c == '"':
                self._string = False
                if self._key:
                    self._expect = _COLON
                else:
                    self._value_done()
            elif c == "\\":
                self._escape = "\\"
            else:  # a raw control character
                self.ok = False
            end += 1
        return end

    def _surrogate(self, escape: str) -> None:
        if escape[1] != "u":
            return
        code = int(escape[2:], 16)
        if self._high:
            self._high = False
            self.ok = 0xDC00 <= code <= 0xDFFF
        elif 0xD800 <= code <= 0xDBFF:
            self._high = True
        elif 0xDC00 <= code <= 0xDFFF:
            self.ok = False

    def _token_prefix(self) -> bool:
        token = self._token
        if token[0] in "tfn":
            return any(word.startswith(token) for word in _LITERALS)
        found = _NUMBER.match(token)
        if found is not None and found.end() == len(token):
            return True
        # an unfinished number: "-", "1.", "1e", "1e+"
        return bool(re.fullmatch(r"-|-?(?:0|[1-9][0-9]*)(?:\.[0-9]*)?(?:[eE][+-]?)?", token)
                    or re.fullmatch(r"-?(?:0|[1-9][0-9]*)\.[0-9]+[eE][+-]?", token))

    def _token_done(self) -> bool:
        token = self._token
        if token[0] in "tfn":
            done = token in _LITERALS
        else:
            found = _NUMBER.match(token)
            done = found is not None and found.end() == len(token)
        if done:
            self._value_done()
        return done
