"""Unit tests of operator."""
