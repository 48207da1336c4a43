"""Dockyard's core: what the facade (``dockyard_api``) and the operator (``dockyard_operator``) share.

The resource types and CRD generation, the device catalog, the model store's storage logic, the job
record, status conditions, API keys, audit, time and field-manager helpers, domain errors and the one
async Kubernetes client. Nothing here imports kopf, FastAPI or either side (import-linter contracts in
``pyproject.toml``, run by ``make lint``; see docs/architecture.md).
"""
