"""The operator's kopf handlers, one module per kind (or group of kinds); importing this package
registers them all with kopf (``kopf run -m dockyard_operator.handlers``, ``python -m dockyard_operator``).

- :mod:`.lifecycle`: start-up (one Context from settings read once), login, clean-up.
- :mod:`.models`: Models (hub models, the import job of uploads).
- :mod:`.deployments`: ModelDeployments and ToolDeployments (work queues fed by their watch events and
  those of their Deployments, Pods, Models and Tools; the indexes the reconciles read).
- :mod:`.apps`: Apps, AppVersions, Environments and the admission webhooks.

The handlers stay thin: the reconciles (``reconcile.py``, ``import_job.py``, ``environments.py``) and the
builders (``builders.py``, ``runtimes.py``, ``assess.py``) hold the logic and import no handler.
"""

# isort: off
# The order of registration is kopf's order of the handlers of one event: the Models' own handlers come
# before the deployments' triggers on Models, the lifecycle, then Apps/AppVersions/Environments.
from dockyard_operator.handlers import models
from dockyard_operator.handlers import deployments
from dockyard_operator.handlers import lifecycle
from dockyard_operator.handlers import apps

# isort: on

__all__ = ["apps", "deployments", "lifecycle", "models"]
