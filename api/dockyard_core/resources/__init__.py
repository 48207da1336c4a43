"""Dockyard's custom-resource types, written once as pydantic models.

The operator and the API facade both import these types; ``python -m dockyard_core.crdgen`` turns them
into the CRD manifests under ``crds/``. Nothing in this package imports kopf or FastAPI (a ruff
banned-api rule enforces it), so it stays a plain, dependency-light description of the API.

Layout:

- :mod:`.base`: the pydantic base classes (camelCase wire names, CEL rules, list semantics) shared by
  every API version;
- :mod:`.cel`: :class:`~.cel.Rule`, one ``x-kubernetes-validations`` rule with its Python twin;
- :mod:`.crdinfo`: what a CRD says besides the schema (names, printer columns, subresources);
- :mod:`.structural`: pydantic JSON Schema → Kubernetes *structural* OpenAPI v3 schema;
- :mod:`.v1alpha1`: the kinds of ``dockyard.dev/v1alpha1``.
"""

GROUP = "dockyard.dev"
"""The API group of every Dockyard custom resource."""
