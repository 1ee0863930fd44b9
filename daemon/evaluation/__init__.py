"""Measuring detection quality and showing the pipeline: ``nearsync evaluate`` and ``nearsync demo``.

What lives here:

- :mod:`daemon.evaluation.evaluate` — the whole pipeline on labelled records in a throwaway database,
  scored as precision/recall/F1 against the true pairs.
- :mod:`daemon.evaluation.demo` — the guided demo on Abt-Buy (or generated ads).
- :mod:`daemon.evaluation.datasets` — reading labelled CSVs (records, pairs) and the shipped data sets.
- :mod:`daemon.evaluation.measures` — pure quality measures (pair P/R/F1, B-cubed, adjusted Rand index).
- :mod:`daemon.evaluation.baselines` — the reference methods the figures are compared with.
- :mod:`daemon.evaluation.generator` — generated ads with known reposts, for when no data is at hand.
- :mod:`daemon.evaluation.loader` — bulk loading of records into the tracked table with COPY.

May import: everything below the CLI (service, ops.migrate, db, the pure core).
"""
