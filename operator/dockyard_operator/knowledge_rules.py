"""Admission rules of knowledge bases (kopf-free; docs/knowledge-bases.md): a KnowledgeBase version pinned by
an active AppVersion (or by a draft an environment serves) is not deleted, naming the environments, as a
Tool's; a new AppVersion's ``knowledgeBaseVersions`` name KnowledgeBases that exist."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dockyard_core.problems import Problem
from dockyard_operator import environments as envs
from dockyard_operator.admission import Refusal, pinned_delete_refusal
from dockyard_operator.kube import KubeApi
from dockyard_operator.version_rules import refusal_message


def kb_object(ref: Mapping[str, Any]) -> str:
    """The KnowledgeBase object a ``knowledgeBaseVersions`` entry pins: ``<name>-<version>``."""
    return f"{ref.get('name')}-{ref.get('version')}"


def kb_holders(
    name: str,
    version: str,
    versions: Iterable[Mapping[str, Any]],
    environments: Sequence[tuple[str, Mapping[str, Any]]],
    apps: Iterable[Mapping[str, Any]] = (),
) -> dict[str, list[str]]:
    """What holds a knowledge base version (:func:`~dockyard_operator.environments.pinned_holders` of
    ``knowledgeBaseVersions``), as a Tool's holders."""
    return envs.pinned_holders("knowledgeBaseVersions", name, version, versions, environments, apps)


async def kb_delete_refusal(kube: KubeApi, kb: Mapping[str, Any]) -> Refusal | None:
    """A KnowledgeBase version linked to an active version is not deleted (409, naming the environments)."""
    return await pinned_delete_refusal(kube, kb, "knowledgeBaseVersions", "knowledge base")


def kb_version_problems(spec: Mapping[str, Any], found: Mapping[str, Mapping[str, Any] | None]) -> list[Problem]:
    """Each ``spec.knowledgeBaseVersions[i]`` names an existing KnowledgeBase (``found``: by object name,
    None when missing), and each ``spec.agents[i].knowledgeBases[j]`` is pinned."""
    problems: list[Problem] = []
    pinned = {str(k.get("name")) for k in spec.get("knowledgeBaseVersions") or []}
    for i, agent in enumerate(spec.get("agents") or []):
        for j, kb in enumerate(agent.get("knowledgeBases") or []):
            if kb not in pinned:
                problems.append(
                    Problem(
                        f"spec.agents[{i}].knowledgeBases[{j}]",
                        f"agent {agent.get('name')}: knowledge base {kb} has no version in spec.knowledgeBaseVersions",
                    )
                )
    for i, ref in enumerate(spec.get("knowledgeBaseVersions") or []):
        if found.get(kb_object(ref)) is None:
            problems.append(
                Problem(
                    f"spec.knowledgeBaseVersions[{i}]",
                    f"knowledge base {ref.get('name')} version {ref.get('version')} does not exist "
                    f"(no KnowledgeBase {kb_object(ref)})",
                )
            )
    return problems


async def appversion_kb_refusal(kube: KubeApi, body: Mapping[str, Any]) -> Refusal | None:
    """A new AppVersion pins KnowledgeBases that exist (422 naming the field)."""
    namespace, spec = body["metadata"]["namespace"], body.get("spec") or {}
    refs = spec.get("knowledgeBaseVersions") or []
    if not refs and not any(a.get("knowledgeBases") for a in spec.get("agents") or []):
        return None
    found = {kb_object(r): await kube.get("knowledgebases", namespace, kb_object(r)) for r in refs}
    problems = kb_version_problems(spec, found)
    return Refusal(refusal_message(problems), 422) if problems else None
