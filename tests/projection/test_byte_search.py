"""The vectorized search (gateway/projection/byte_search.py): a miss is a miss, a match is
found wherever it sits, and anything it cannot read sends the caller to look closer."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.projection.byte_search import holds, rust_pattern

E_NOTATION = rust_pattern(r"[0-9]e\+[0-9]")


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300),
       st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300))
def test_a_match_is_found_wherever_it_sits_in_utf8_bytes(before: str, after: str) -> None:
    assert holds(E_NOTATION, (before + "1.5e+30" + after).encode())


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Nd")), max_size=2000))
def test_no_digit_no_match(text: str) -> None:
    assert not holds(E_NOTATION, text.encode())
    assert not holds(E_NOTATION, text)


def test_bytes_it_cannot_read_count_as_a_match() -> None:
    assert holds(E_NOTATION, b"\xff\xfe not UTF-8" * 1000)
