"""Pure builders: the Kubernetes objects that serve a ModelDeployment or a ToolDeployment, one module per
kind.

Nothing here talks to the API server; the reconciles resolve the inputs (the Model, the catalogs) and
apply what these functions return with server-side apply. Every object carries the same labels, and
the operator adopts them (controller owner reference), so deletion cleans up through the garbage
collector.

- :mod:`.common`: the labels and annotations of every child, names, the template hash, the Deployment
  and Service pair both kinds are served by.
- :mod:`.model`: a ModelDeployment's workload (the served model and its weights, the storage
  initializers and their download Secret, the engine's pod).
- :mod:`.tool`: a ToolDeployment's workload (a container-image tool).
"""
