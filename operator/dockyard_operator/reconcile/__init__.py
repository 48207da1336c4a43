"""The operator's reconciles, one module per kind, free of kopf: each reads the current state, applies
what should exist and writes the status, and returns what the handler needs (an
:class:`~dockyard_operator.workqueue.Outcome` with the Events to post). The kopf handlers in
:mod:`dockyard_operator.handlers` call them.

- :mod:`.model`: a Model (:class:`~.model.Importer`, the import job of an uploaded Model, its stored
  files' deletion and garbage collection); its file work is :mod:`dockyard_operator.importing`.
- :mod:`.modeldeployment`, :mod:`.tooldeployment`: the two workload kinds, run by their work queues;
  :mod:`.workload` holds what they share (children, dock job, status write).
- :mod:`.app`: an App's draft Environment, and the Environments an App's change reaches.
- :mod:`.environment`: an Environment (history, ToolDeployments, checklist, URLs, the AppVersions'
  ``deployedIn``, the audit record) and its deletion; its pure parts are :mod:`dockyard_operator.environments`.
"""
