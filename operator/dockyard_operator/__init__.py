"""The Dockyard operator: kopf handlers that reconcile Dockyard's custom resources."""
