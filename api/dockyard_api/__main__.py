"""``python -m dockyard_api``: serve the facade with uvicorn."""

from __future__ import annotations

import uvicorn

from dockyard_api.app import create_app
from dockyard_api.settings import ApiSettings


def main() -> None:
    settings = ApiSettings()
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info")


if __name__ == "__main__":
    main()
