"""structlog set-up: JSON lines when stderr is not a terminal, coloured console lines when it is.

Never log a DSN or an API key; use :func:`daemon.config.redact_dsn` when a DSN must be shown.
"""

from __future__ import annotations

import logging
import sys

import structlog


class StderrLogger:
    """structlog's logger: each rendered line goes to the *current* ``sys.stderr`` (it may be
    swapped, e.g. by test capture), through ``tqdm.write`` while a progress bar is drawn (``nearsync
    reindex``, ``rarity refresh``), which clears the bar, prints the line and draws the bar again
    below it, so log lines do not break a bar into pieces. tqdm is not imported for it: a process
    that draws no bar has not imported tqdm, and writes plainly."""

    def msg(self, message: str) -> None:
        """Write ``message`` and a newline to stderr (see the class)."""
        tqdm = sys.modules.get("tqdm")
        if tqdm is not None and getattr(tqdm.tqdm, "_instances", None):
            tqdm.tqdm.write(message, file=sys.stderr)
            return
        print(message, file=sys.stderr, flush=True)

    log = debug = info = warn = warning = error = err = critical = exception = fatal = failure = msg


def _stderr_logger(*_args: object) -> StderrLogger:
    """The process's :class:`StderrLogger` (structlog's ``logger_factory``)."""
    return StderrLogger()


def configure_logging(level: str = "info", *, json: bool | None = None) -> None:
    """Configure structlog once for the process.

    Args:
        level: debug, info, warning or error.
        json: force JSON (True) or console (False); default: JSON unless stderr is a TTY.
    """
    use_json = (not sys.stderr.isatty()) if json is None else json
    renderer = structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """A structlog logger with ``component=name``, bound lazily: each call reads the configuration
    current at that moment, so a module-level logger created at import, before
    :func:`configure_logging`, still writes where and as configured (binding it at import fixed it
    to structlog's default, printing on stdout, e.g. into ``evaluate --json-only``'s report)."""
    return structlog.get_logger(component=name)  # type: ignore[no-any-return]
