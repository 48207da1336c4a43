"""Dockyard's facade (FastAPI) and custom-resource types (``dockyard_core.resources``).

Importing this package imports nothing heavy: the operator imports the resource types and the
device catalog without pulling in FastAPI.
"""

__version__ = "0.1.0"
