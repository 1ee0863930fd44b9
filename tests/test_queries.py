"""The named queries of ``sql/queries`` as psycopg will read them (no database needed)."""

from __future__ import annotations

import re

from daemon.db.queries import _all_queries

#: A psycopg placeholder (``%(name)s``, binary ``%(name)b``, text ``%(name)t``) or an escaped ``%%``.
PLACEHOLDER = re.compile(r"%\(\w+\)[sbt]|%%")


def test_no_stray_percent_sign_in_queries_with_parameters() -> None:
    """psycopg parses the whole text of a statement it is given parameters for, comments included: a
    lone ``%`` (say "20% less" in a comment at the end of a line: whole-line comments are not sent)
    makes every execution fail with "incomplete placeholder". Every query that has placeholders must
    have no other ``%``."""
    queries = _all_queries()
    assert "candidates_many" in queries  # the files were found and split by name
    stray = {name: re.findall(r".{0,30}%.{0,10}", PLACEHOLDER.sub("", text))
             for name, text in queries.items() if "%(" in text and "%" in PLACEHOLDER.sub("", text)}
    assert stray == {}


def test_queries_are_sent_without_their_comment_lines_and_fit_psycopgs_cache() -> None:
    """What reaches the server has no whole-line comments (they are for the reader of ``sql/``), and
    no text is longer than psycopg caches the conversion of (above it, the placeholders are parsed
    again on every execution); a ``-- plan: generic`` query is still known as one."""
    from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

    from daemon.db.queries import _raw_queries, generic_plan_ok, query

    raw, sent = _raw_queries(), _all_queries()
    assert raw.keys() == sent.keys()
    assert "-- Only the named keys" in raw["get_document_parts"]
    assert not [n for n, t in sent.items() if any(line.lstrip().startswith("--") for line in t.splitlines())]
    too_long = {n: len(t.encode()) for n, t in sent.items() if len(t.encode()) > MAX_CACHED_STATEMENT_LENGTH}
    assert too_long == {}
    generic = {n for n, t in raw.items() if any(line.startswith("-- plan: generic") for line in t.splitlines())}
    assert "get_document_parts" in generic
    assert {n for n in sent if generic_plan_ok(query(n))} == generic
