"""News headlines grouped by story, as a labelled set for ``nearsync evaluate``.

Built from ``../shared/data/news-stories`` (the first 6,367 rows of the UCI News Aggregator data
set, Gasparetti 2016, CC BY 4.0): one record per headline (``id,title,publisher,host``, UTF-8, in
the file's order, which is the order of publication), and as "true pairs" every pair of headlines
of one story. The file's last line is cut mid-row (no story): it is left out, so 6,366 records of
87 stories (9-322 headlines each) and 397,104 pairs.

A story groups the articles about one event, so most same-story pairs are paraphrases by different
publishers, not near-duplicates: **recall against these pairs means nothing**. Precision does: a
pair flagged across two stories is a pair of headlines the labels put under different events. It
is a lower bound with two kinds of noise: the labels split some events over several stories (the
Mt. Gox bankruptcy is two), and a same-story pair may still be two different articles.

Run ``python -m daemon.evaluation.news OUT_DIR [--data DIR]``, then ``nearsync evaluate --records
OUT_DIR/records.csv --pairs OUT_DIR/pairs.csv --map title=title`` (headlines only: the records have
no body, price or seller, so they are compared across the whole table).
"""

from __future__ import annotations

import argparse
import csv
import itertools
from collections import defaultdict
from pathlib import Path

from daemon.evaluation.datasets import default_data_dir

NEWS_FILE = Path("news-stories") / "uci-news-aggregator_first6367rows.csv"
"""The headlines file, relative to the shared data directory."""


def write_news_set(data_dir: Path, out: Path) -> tuple[Path, Path, int, int]:
    """Write ``out/records.csv`` and ``out/pairs.csv`` from the headlines file of ``data_dir``.

    Rows without a story or a title (the cut last line) are left out.

    Returns:
        ``(records_csv, pairs_csv, records, pairs)``.

    Raises:
        FileNotFoundError: the headlines file is not in ``data_dir``.
    """
    path = data_dir / NEWS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found")
    out.mkdir(parents=True, exist_ok=True)
    stories: dict[str, list[str]] = defaultdict(list)
    records_csv, pairs_csv = out / "records.csv", out / "pairs.csv"
    n = 0
    with path.open(encoding="utf-8", newline="") as f, records_csv.open("w", encoding="utf-8", newline="") as r:
        w = csv.writer(r)
        w.writerow(["id", "title", "publisher", "host"])
        for row in csv.DictReader(f):
            story, title = (row.get("STORY") or "").strip(), (row.get("TITLE") or "").strip()
            if not story or not title:
                continue
            w.writerow([row["ID"], title, row.get("PUBLISHER") or "", row.get("HOSTNAME") or ""])
            stories[story].append(row["ID"])
            n += 1
    pairs = 0
    with pairs_csv.open("w", encoding="utf-8", newline="") as p:
        w = csv.writer(p)
        w.writerow(["a", "b"])
        for ids in stories.values():
            for a, b in itertools.combinations(ids, 2):
                w.writerow([a, b])
                pairs += 1
    return records_csv, pairs_csv, n, pairs


def main(argv: list[str] | None = None) -> int:
    """``python -m daemon.evaluation.news OUT_DIR [--data DIR]``; prints the two paths and counts.
    Exit code 2 when the headlines file is missing."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="directory to write records.csv and pairs.csv to")
    p.add_argument("--data", type=Path, default=None,
                   help="the shared data directory (default: $NEARSYNC_DATA or ../shared/data)")
    args = p.parse_args(argv)
    data = args.data or default_data_dir()
    if data is None:
        p.error("no data directory: give --data or set NEARSYNC_DATA")
    try:
        records, pairs, n, m = write_news_set(data, args.out)
    except FileNotFoundError as e:
        p.error(str(e))
    print(f"{records} ({n:,} headlines)\n{pairs} ({m:,} same-story pairs)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
