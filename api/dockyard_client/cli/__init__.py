"""The ``dockyard`` command (Typer + Rich). ``main`` is the console script."""

from __future__ import annotations

from dockyard_client.cli.app import app, main

__all__ = ["app", "main"]
