"""Unit tests of client."""
