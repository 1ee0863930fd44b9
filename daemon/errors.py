"""Exceptions shared across nearsync's layers (no I/O, no imports from the rest of the package)."""

from __future__ import annotations


class NearsyncError(Exception):
    """Base class of every error nearsync raises on purpose."""


class ConfigError(NearsyncError, ValueError):
    """A configuration value is missing or invalid.

    Args:
        key: the dotted setting name, e.g. ``"dedup.duplicate_threshold"``; always named in the message.
        message: what is wrong and what is expected.
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"config error at '{key}': {message}")
        self.key = key
        self.message = message


class RecordError(NearsyncError, ValueError):
    """One record cannot be processed (bad data); it goes to the dead-letter table, the rest goes on."""
