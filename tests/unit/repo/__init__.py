"""Unit tests of repo."""
