"""An agent's ``model``: the ModelDeployment it names, by object name or by display name (pure).

The deploy call's ``name`` is any text and the ModelDeployment's object name is derived from it
(:func:`~dockyard_core.resources.v1alpha1.modeldeployment.model_deployment_name`); the ModelDeployment
keeps the text as ``spec.name``. An agent may name either: the object name wins; else the one
ModelDeployment of the namespace whose ``spec.name`` is the text. Two or more with that display name is
ambiguous (the agent must name the object). The version webhook refuses what does not resolve, naming
``spec.agents[i].model``; the runtime resolves the same way on each turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelRef:
    """What an agent's ``model`` resolves to: the ModelDeployment's object name, or why it does not."""

    name: str | None
    problem: str | None = None


def resolve_model(model: str, deployments: Mapping[str, str]) -> ModelRef:
    """Resolve ``model`` among ``deployments`` (ModelDeployment object name -> its display name, spec.name)."""
    if model in deployments:
        return ModelRef(model)
    named = sorted(name for name, display in deployments.items() if display == model)
    if len(named) == 1:
        return ModelRef(named[0])
    if named:
        return ModelRef(
            None,
            f"model {model!r} is ambiguous: the display name of ModelDeployments {', '.join(named)} "
            "(name the object instead)",
        )
    return ModelRef(None, f"unknown model {model!r} (no ModelDeployment of that name or display name)")
