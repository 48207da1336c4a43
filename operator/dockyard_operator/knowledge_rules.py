"""Admission rules of knowledge bases (kopf-free; docs/knowledge-bases.md): a KnowledgeBase version pinned by
an active AppVersion (or by a draft an environment serves) is not deleted, naming the environments, as a
Tool's; a new AppVersion's ``knowledgeBaseVersions`` name KnowledgeBases that exist."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dockyard_core.problems import Problem
from dockyard_operator import environments as envs
from dockyard_operator.admission import Refusal
from dockyard_operator.kube import KubeApi
from dockyard_operator.version_rules import refusal_message

DRAFT = "draft"


def kb_object(ref: Mapping[str, Any]) -> str:
    """The KnowledgeBase object a ``knowledgeBaseVersions`` entry pins: ``<name>-<version>``."""
    return f"{ref.get('name')}-{ref.get('version')}"


def _pins(spec: Mapping[str, Any], name: str, version: str) -> bool:
    return (name, version) in {(k.get("name"), k.get("version")) for k in spec.get("knowledgeBaseVersions") or []}


def kb_holders(
    name: str,
    version: str,
    versions: Iterable[Mapping[str, Any]],
    environments: Sequence[tuple[str, Mapping[str, Any]]],
    apps: Iterable[Mapping[str, Any]] = (),
) -> dict[str, list[str]]:
    """What holds a knowledge base version, each with the environments deploying it: deployed AppVersions
    that pin it, and ``draft of app <name>`` for a draft pinning it that an environment serves."""
    holders: dict[str, list[str]] = {}
    for app_version in versions:
        spec = app_version.get("spec") or {}
        if _pins(spec, name, version):
            held = envs.environments_deploying(spec.get("appRef", ""), spec.get("version", ""), environments)
            if held:
                holders[envs.version_object(spec.get("appRef", ""), spec.get("version", ""))] = held
    for app in apps:
        app_name = (app.get("metadata") or {}).get("name", "")
        if not _pins(app.get("spec") or {}, name, version):
            continue
        serving = sorted(
            env_name
            for env_name, env in environments
            if (env.get("spec") or {}).get("appRef") == app_name
            and (
                not (env.get("spec") or {}).get("appVersion") or (env.get("status") or {}).get("activeVersion") == DRAFT
            )
        )
        if serving:
            holders[f"draft of app {app_name}"] = serving
    return holders


async def kb_delete_refusal(kube: KubeApi, kb: Mapping[str, Any]) -> Refusal | None:
    """A KnowledgeBase version linked to an active version is not deleted (409, naming the environments)."""
    namespace, spec = kb["metadata"]["namespace"], kb.get("spec") or {}
    versions = await kube.list_objects("appversions", namespace)
    environments = [(e["metadata"]["name"], e) for e in await kube.list_objects("environments", namespace)]
    apps = await kube.list_objects("apps", namespace)
    holders = kb_holders(spec.get("name", ""), spec.get("version", ""), versions, environments, apps)
    if not holders:
        return None
    used = "; ".join(
        f"{v if v.startswith('draft of') else f'app version {v}'} (deployed in {', '.join(e)})"
        for v, e in sorted(holders.items())
    )
    return Refusal(
        f"knowledge base {kb['metadata']['name']} is linked to an active version and cannot be deleted: used by {used}",
        409,
    )


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
