"""Chaos suite for nearsync: see bench/chaos/run.py."""
