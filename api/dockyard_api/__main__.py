"""``python -m dockyard_api``: serve the facade with uvicorn."""

from __future__ import annotations

import uvicorn

from dockyard_api import server
from dockyard_api.app import create_app
from dockyard_api.settings import ApiSettings
from dockyard_core import logs


def main() -> None:
    settings = ApiSettings()
    logs.configure(settings.log_format, settings.log_level)
    served = server.config(
        create_app(settings),
        settings,
        log_level=settings.log_level.lower(),
        access_log=settings.access_log,
        log_config=None,  # logs.configure set up the handlers (format, request id, redaction)
    )
    uvicorn.Server(served).run()


if __name__ == "__main__":
    main()
