"""``python -m dockyard_localcluster engines`` (``make run`` starts it beside the operator): the runner with
its settings from the environment against the KUBECONFIG cluster, until SIGTERM or Ctrl-C, after which
every engine stops and its pod loses the endpoint and readiness."""

from __future__ import annotations

import logging
import os
import signal

from dockyard_localcluster.engines.runner import EngineRunner, EngineSettings, log


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = EngineSettings()
    from dockyard_core.kubeconfig import api_client

    kubeconfig = settings.kubeconfig or os.environ.get("KUBECONFIG")
    with api_client(kubeconfig) as api:
        runner = EngineRunner(api, settings)

        def _stop(signum: int, frame: object) -> None:
            runner.stop_event.set()
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, _stop)
        log.info("local engine runner: model store %s, at most %d engines", runner.store, runner.settings.max_engines)
        try:
            runner.run()
        except KeyboardInterrupt:
            pass
        finally:
            runner.stop_event.set()
            runner.stop_all()
    return 0
