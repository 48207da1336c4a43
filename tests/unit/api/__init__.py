"""Unit tests of api."""
