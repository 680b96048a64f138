"""store.load(timeline=False): the list's fast path reads meta and summary only, and falls back to a full
parse whenever the file is not laid out as save_session writes it, so it never hides a broken file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_history_sessions import make_session

from gputop_tracker.core.model.models import SCHEMA_VERSION
from gputop_tracker.core.store import sessions as store


def _save(tmp_path: Path, i: int = 1, **kw: object) -> Path:
    return store.save_session(tmp_path, make_session(i, **kw))  # type: ignore[arg-type]


def test_head_only_matches_full_load_without_timeline(tmp_path: Path) -> None:
    path = _save(tmp_path, n_gpus=2)
    full = store.load(path)
    head = store.load(path, timeline=False)
    assert full.session is not None and head.session is not None
    assert head.partial and not full.partial
    assert head.session.meta == full.session.meta
    assert head.session.summary == full.session.summary
    assert head.session.timeline.rows == [] and len(full.session.timeline.rows) > 2


def test_list_entries_default_still_loads_timelines(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    _save(tmp_path, 2)
    full = store.list_entries(tmp_path)
    fast = store.list_entries(tmp_path, timeline=False)
    assert [e.id for e in full] == [e.id for e in fast]
    assert all(e.session is not None and e.session.timeline.rows for e in full)
    assert all(e.partial for e in fast)


def test_truncated_inside_timeline_is_unreadable_in_fast_path(tmp_path: Path) -> None:
    path = _save(tmp_path)
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) - 200])  # cut inside the timeline rows: meta and summary are intact
    entry = store.load(path, timeline=False)
    assert entry.session is None
    assert entry.error is not None and "truncated" in entry.error


def test_other_key_order_falls_back_to_full_parse(tmp_path: Path) -> None:
    s = make_session(3)
    path = tmp_path / f"{s['meta']['id']}.json"
    reordered = {"timeline": s["timeline"], "schema_version": 1, "meta": s["meta"], "summary": s["summary"]}
    path.write_text(json.dumps(reordered, indent=1))
    entry = store.load(path, timeline=False)
    assert entry.session is not None and entry.session.meta.id == s["meta"]["id"]
    assert not entry.partial  # read in full, timeline included
    assert entry.session.timeline.rows


def test_command_text_that_looks_like_the_timeline_key(tmp_path: Path) -> None:
    path = _save(tmp_path, command=["echo", ',"timeline":{"rows":[]}', "}}"])
    entry = store.load(path, timeline=False)
    assert entry.session is not None and entry.partial
    assert entry.session.meta.command[1] == ',"timeline":{"rows":[]}'


def test_newer_schema_and_junk_are_reported_in_both_paths(tmp_path: Path) -> None:
    s = make_session(4)
    s["schema_version"] = SCHEMA_VERSION + 1
    newer = store.save_session(tmp_path, s)
    junk = tmp_path / "20240101-000000-x-1-junk.json"
    junk.write_bytes(b"\xff\xfe garbage")
    not_obj = tmp_path / "20240101-000001-x-1-list.json"
    not_obj.write_text('[1, 2, {"timeline": 1}]')
    for timeline in (True, False):
        e = store.load(newer, timeline=timeline)
        assert e.session is None and e.error is not None and "newer" in e.error
        e = store.load(junk, timeline=timeline)
        assert e.session is None and e.error is not None and "corrupt" in e.error
        e = store.load(not_obj, timeline=timeline)
        assert e.session is None and e.error == "not a session (JSON is not an object)"


def test_invalid_summary_is_reported(tmp_path: Path) -> None:
    s = make_session(5)
    s["summary"]["max_ram"] = "lots"
    path = store.save_session(tmp_path, s)
    e = store.load(path, timeline=False)
    assert e.session is None and e.error is not None and e.error.startswith("invalid session: summary.max_ram")


def test_a_summary_with_no_figures_is_not_listed_as_a_finished_run(tmp_path: Path) -> None:
    """Every field of a report has a default: `"summary": {"bogus": 1}` listed as a finished run of 0.00 s."""
    s = make_session(5)
    s["summary"] = {"bogus": 1}
    path = store.save_session(tmp_path, s)
    for timeline in (True, False):
        e = store.load(path, timeline=timeline)
        assert e.session is None and e.error == "invalid session: summary holds none of a report's figures"


def test_unreadable_file(tmp_path: Path) -> None:
    path = _save(tmp_path)
    path.chmod(0)
    try:
        path.read_bytes()
        pytest.skip("running as root: file permissions do not apply")
    except OSError:
        pass
    e = store.load(path, timeline=False)
    path.chmod(0o644)
    assert e.session is None and e.error is not None and e.error.startswith("cannot read")


def test_a_pretty_printed_session_is_listed_from_its_head(tmp_path: Path) -> None:
    """`jq . s.json > s.json` (indented, spaces after colons): the head reader finds the timeline all the same, so
    a long session is listed without reading it whole (a 60 MB one took 14 s, 300 MB over 2 minutes)."""
    s = make_session(4)
    path = tmp_path / f"{s['meta']['id']}.json"
    path.write_text(json.dumps(s, indent=2))
    entry = store.load(path, timeline=False)
    assert entry.session is not None and entry.partial  # from its head only
    assert entry.session.meta.id == s["meta"]["id"]
    assert entry.session.summary == store.load(path).session.summary  # type: ignore[union-attr]


def test_a_huge_session_without_the_usual_layout_is_skipped_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No timeline key in the first _HEAD_MAX bytes and larger than a listing reads whole: listed as unreadable,
    saying why and how to read it, instead of parsed whole. `sessions show` (a full load) still reads it."""
    s = make_session(5)
    path = tmp_path / f"{s['meta']['id']}.json"
    reordered = {"timeline": s["timeline"], "schema_version": 1, "meta": s["meta"], "summary": s["summary"]}
    path.write_text(json.dumps(reordered))
    monkeypatch.setattr(store, "_HEAD_MAX", 100)
    monkeypatch.setattr(store, "_HEAD_CHUNK", 64)
    monkeypatch.setattr(store, "_LIST_WHOLE_MAX", path.stat().st_size - 1)
    (entry,) = store.list_entries(tmp_path, timeline=False)
    assert entry.session is None and entry.error is not None
    assert entry.error.startswith("not listed:") and "sessions show" in entry.error
    assert store.load(path).session is not None


def test_a_control_character_in_a_session_is_named_once(tmp_path: Path) -> None:
    path = tmp_path / "20260101-000000-h-1-abcd.json"
    path.write_bytes(b'{"meta": "\x01"}')
    entry = store.load(path)
    assert entry.error == "corrupt or truncated JSON (Invalid control character at byte 10)"
