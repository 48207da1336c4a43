"""Shared fixtures. e2e fixtures (cluster, namespaces) live in ``tests/e2e/conftest.py``."""
