"""Unit tests of ct2."""
