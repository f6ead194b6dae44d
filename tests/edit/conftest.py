"""Fixtures for the speculative-edit tests (tests/edit)."""
