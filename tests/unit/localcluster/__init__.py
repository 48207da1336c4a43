"""Unit tests of localcluster."""
