"""The operator's kopf handlers, one module per kind (or group of kinds); importing this package
registers them all with kopf (``kopf run -m dockyard_operator.handlers``, ``python -m dockyard_operator``).

- :mod:`.lifecycle`: start-up (one Context from settings read once), login, clean-up.
- :mod:`.models`: Models (hub models, the import job of uploads).
- :mod:`.deployments`: ModelDeployments and ToolDeployments (work queues fed by their watch events and
  those of their Deployments, Pods, Models and Tools; the indexes the reconciles read).
- :mod:`.apps`: Apps (the draft Environment; a changed draft reaches the Environments serving it).
- :mod:`.environments`: Environments (events, periodic re-check, deletion; the indexes of AppVersions and
  Environments).
- :mod:`.admission`: the admission webhooks of Tools, AppVersions and Environments.
- :mod:`.knowledge`: KnowledgeBases (indexing runs, their Jobs, the deletion guard and the AppVersion's
  knowledge-base check).
- :mod:`.events`: the one place Events go through kopf.

The handlers stay thin: they call the kopf-free reconciles (the ``reconcile`` package, one module per
kind; a Model's is ``reconcile/model.py``) and post the Events those return, or the checks of ``admission.py`` and
raise their refusals; those and the builders (``builders.py``, ``environments.py``, ``runtimes.py``,
``assess.py``) hold the logic and import no handler.
"""

# isort: off
# The order of registration is kopf's order of the handlers of one event: the Models' own handlers come
# before the deployments' triggers on Models, the lifecycle, then Apps, Environments and the webhooks.
from dockyard_operator.handlers import fastjson
from dockyard_operator.handlers import models
from dockyard_operator.handlers import deployments
from dockyard_operator.handlers import lifecycle
from dockyard_operator.handlers import apps
from dockyard_operator.handlers import environments
from dockyard_operator.handlers import admission
from dockyard_operator.handlers import knowledge

# isort: on

fastjson.install()  # kopf's watch events decoded with orjson (see fastjson.py)

__all__ = ["admission", "apps", "deployments", "environments", "knowledge", "lifecycle", "models"]
