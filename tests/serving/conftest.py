"""Fixtures of the serving tests: the session's private CA and certificates (tests/support/pki.py)."""

from support.pki import pki

__all__ = ["pki"]
