"""The management API (docs/apps-environments.md): Apps and their versions, environments, API keys, the
catalog to pick from and usage statistics. Every call acts as the calling Kubernetes user (impersonation),
so RBAC decides. Each domain: ``router`` (HTTP only) and ``service`` (the logic, through core's
repositories); the request and answer models are in :mod:`.schemas`. The console calls the services."""
