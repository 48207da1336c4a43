"""``python -m dockyard_ct2`` / ``dockyard-ct2-server``: load the model, then serve it."""

from __future__ import annotations

import logging
import sys

from dockyard_ct2.config import parse_args


def main(argv: list[str] | None = None) -> None:
    config = parse_args(sys.argv[1:] if argv is None else argv)  # before the heavy imports: --help is quick
    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    import uvicorn

    from dockyard_ct2.server import create_app

    # The lifespan loads the model before the socket accepts connections: /health answers only then.
    uvicorn.run(
        create_app(config),
        host=config.host,
        port=config.port,
        log_level=config.log_level,
        access_log=config.log_level == "debug",
        timeout_graceful_shutdown=10,
    )


if __name__ == "__main__":
    main()
