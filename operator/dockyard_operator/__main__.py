"""``python -m dockyard_operator``: run the operator (kopf) with Dockyard's handlers.

Runs cluster-wide by default; ``--namespace`` restricts it. ``--standalone`` disables kopf peering
(for a single local instance); the Helm chart runs with peering so only one replica is active.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

import kopf
import uvloop

import dockyard_operator.handlers  # noqa: F401  (registers the handlers)
from dockyard_core import logs
from dockyard_operator import memprofile

WATCH_HANDLERS = frozenset({"tool_deployment_event", "model_event", "tool_event"})


def _quiet_watch_handlers(record: logging.LogRecord) -> bool:
    """Drop "Handler 'x' succeeded." of the handlers that only queue work: they run on every watch event."""
    message = record.getMessage()
    return not (
        message.startswith("Handler '") and message.endswith("' succeeded.") and message[9:-12] in WATCH_HANDLERS
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="dockyard-operator", description=__doc__)
    parser.add_argument("-n", "--namespace", action="append", default=[], help="watch only these")
    parser.add_argument("--standalone", action="store_true", help="no peering (one local instance)")
    parser.add_argument("--peering", default="dockyard", help="kopf peering name (default: dockyard)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every handler run")
    parser.add_argument(
        "--log-format",
        choices=[f.name.lower() for f in kopf.LogFormat],
        default=os.environ.get("DOCKYARD_OPERATOR_LOG_FORMAT", "plain"),
        help="plain, full or json (one JSON object per line, with request_id on job lines); "
        "default: DOCKYARD_OPERATOR_LOG_FORMAT or plain",
    )
    args = parser.parse_args(argv)
    memprofile.start_from_env()
    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat[args.log_format.upper()])
    logs.protect_all_handlers()  # no API key or token reaches a log line
    if not args.verbose:  # one line per watch event of every Pod and Deployment would drown the log
        logging.getLogger("kopf.objects").addFilter(_quiet_watch_handlers)
    # uvloop, as kopf's own CLI uses it: the event loop and its TLS streams cost less per watch event
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(
            kopf.operator(
                standalone=args.standalone,
                # naming a peering makes it mandatory: the chart installs kopf's peering CRD
                peering_name=None if args.standalone else args.peering,
                clusterwide=not args.namespace,
                namespaces=args.namespace,
                # the operator's own watches (ModelDeployments) serve the same namespaces as kopf's
                memo=kopf.Memo(namespaces=tuple(args.namespace)),
            )
        )


if __name__ == "__main__":
    main()
