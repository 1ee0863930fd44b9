"""The named queries of ``sql/queries`` as psycopg will read them (no database needed)."""

from __future__ import annotations

import re

from daemon.db.queries import _all_queries

#: A psycopg placeholder (``%(name)s``, binary ``%(name)b``, text ``%(name)t``) or an escaped ``%%``.
PLACEHOLDER = re.compile(r"%\(\w+\)[sbt]|%%")


def test_no_stray_percent_sign_in_queries_with_parameters() -> None:
    """psycopg parses the whole text of a statement it is given parameters for, comments included: a
    lone ``%`` (say "20% less" in a comment) makes every execution fail with "incomplete
    placeholder". Every query that has placeholders must have no other ``%``."""
    queries = _all_queries()
    assert "candidates_many" in queries  # the files were found and split by name
    stray = {name: re.findall(r".{0,30}%.{0,10}", PLACEHOLDER.sub("", text))
             for name, text in queries.items() if "%(" in text and "%" in PLACEHOLDER.sub("", text)}
    assert stray == {}
