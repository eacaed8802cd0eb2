"""The record of a cache entry's pieces: cut with checksums, merged, found under a read."""

from __future__ import annotations

import contextlib
import zlib
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from nn_handler._io.storage.remote import pieces

_ROW = st.tuples(st.integers(0, 5_000), st.integers(1, 300), st.integers(0, 3))
_RANGE = st.tuples(st.integers(0, 5_500), st.integers(0, 400))


def test_cut_makes_pieces_of_at_most_max_piece_with_their_checksums() -> None:
    data = bytes(range(256)) * (3 * pieces.MAX_PIECE // 256 + 7)
    rows = pieces.cut(100, data)
    assert [(s, e) for s, e, _ in rows] == [
        (100 + k, 100 + min(k + pieces.MAX_PIECE, len(data)))
        for k in range(0, len(data), pieces.MAX_PIECE)
    ]
    assert all(c == zlib.crc32(data[s - 100 : e - 100]) for s, e, c in rows)


@settings(max_examples=200, deadline=None)
@given(st.lists(_ROW, max_size=40), st.lists(_ROW, max_size=10))
def test_with_added_sorts_and_keeps_each_row_once(old: list, new: list) -> None:
    def rows(spec: list) -> list[tuple[int, int, int]]:
        return [(s, s + n, c) for s, n, c in spec]

    held = pieces.with_added(pieces.no_pieces(), rows(old))
    merged = pieces.with_added(held, rows(new))
    assert merged.tolist() == [list(r) for r in sorted(set(rows(old + new)))]
    gone = set(rows(new))
    assert pieces.removed(merged, rows(new)).tolist() == [
        r for r in merged.tolist() if tuple(r) not in gone
    ]


@settings(max_examples=300, deadline=None)
@given(st.lists(_ROW, max_size=40), st.lists(_RANGE, min_size=1, max_size=12), st.booleans())
def test_touching_finds_exactly_the_pieces_under_a_read(
    spec: list, ranges: list, by_merged_ranges: bool
) -> None:
    held = pieces.with_added(pieces.no_pieces(), [(s, s + n, c) for s, n, c in spec])
    wanted = {
        tuple(r) for r in held.tolist() if any(n and r[0] < o + n and r[1] > o for o, n in ranges)
    }
    # (by merged ranges: the path for reads of many ranges over many pieces)
    with mock.patch.object(pieces, "_PAIRS", 0) if by_merged_ranges else contextlib.nullcontext():
        found = {tuple(r) for r in pieces.touching(held, ranges).tolist()}
    assert found == wanted
