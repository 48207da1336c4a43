"""Dockyard's Python client: the public API, deployed-app calls and the management API, sync and async.

It talks HTTP only (httpx) and imports neither the facade nor the operator.
"""

from __future__ import annotations

__version__ = "0.1.0"

from dockyard_client.async_client import AsyncDockyardClient
from dockyard_client.client import DockyardClient
from dockyard_client.errors import ApiError, DockyardClientError

__all__ = ["ApiError", "AsyncDockyardClient", "DockyardClient", "DockyardClientError", "__version__"]
