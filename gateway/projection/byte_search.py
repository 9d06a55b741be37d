"""Whether a whole body's bytes hold a pattern, at the speed of a vectorized substring search.

Python's ``re`` and ``bytes.find`` walk a body byte by byte when the pattern's first byte is
common in JSON text (a backslash, an ``e``): ~0.3–0.7 ns a byte, a quarter of a millisecond
for a 300 KB history. The Rust regex of pydantic-core finds a pattern's literal part with a
vectorized search first (~0.05–0.1 ns a byte). Its string pattern constraint is the way in:
a string without a match fails it.
"""

from __future__ import annotations

from pydantic_core import SchemaValidator, ValidationError, core_schema

# Below this many bytes, the exception a miss raises costs more than the search saves: use
# ``in`` or ``re`` there.
SEARCH_FROM = 4096


def rust_pattern(pattern: str) -> SchemaValidator:
    """A compiled search for ``pattern`` (Rust regex syntax) to pass to :func:`holds`."""
    return SchemaValidator(core_schema.str_schema(pattern=pattern),
                           core_schema.CoreConfig(regex_engine="rust-regex"))


def holds(pattern: SchemaValidator, text: str | bytes) -> bool:
    """Whether ``text`` (UTF-8 bytes are read without a copy) holds a match of ``pattern``.
    True too when anything else fails it, such as bytes that are not UTF-8: then the caller
    looks closer."""
    try:
        pattern.validate_python(text)
    except ValidationError as failed:
        return failed.errors(include_url=False, include_context=False,
                             include_input=False)[0]["type"] != "string_pattern_mismatch"
    return True
