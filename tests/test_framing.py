"""LineFramer: the one line splitter of the sampler's message pipe."""

from __future__ import annotations

from gputop_tracker.core.sampling.framing import LineFramer


def test_lines_split_across_reads_are_joined() -> None:
    framer = LineFramer()
    framer.feed(b'{"a": 1}\n{"b"')
    assert list(framer.lines()) == [b'{"a": 1}']
    framer.feed(b': 2}\n\n{"c": 3}\n')
    assert list(framer.lines()) == [b'{"b": 2}', b"", b'{"c": 3}']


def test_a_last_line_without_newline_is_held_back() -> None:
    framer = LineFramer()
    framer.feed(b"half a mess")
    assert list(framer.lines()) == []
    framer.feed(b"age")
    assert list(framer.lines()) == []


def test_lines_not_taken_stay_for_the_next_consumer() -> None:
    framer = LineFramer()
    framer.feed(b"one\ntwo\nthree\n")
    first = framer.lines()
    assert next(first) == b"one"
    del first  # a consumer that stopped part-way
    assert list(framer.lines()) == [b"two", b"three"]
