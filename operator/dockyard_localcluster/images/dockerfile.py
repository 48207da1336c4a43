"""The pure part of the content key: a Dockerfile's stages, what each stage reads (COPY/ADD sources, bind
mounts, other stages, images and named contexts), the stages a target needs, and which files of the build
context a target copies once ``.dockerignore`` has filtered them. No podman, no file system."""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass
class Stage:
    name: str
    base: str
    sources: list[str] = field(default_factory=list)
    """Build-context paths that COPY/ADD (without --from) or a context bind mount read."""
    uses: set[str] = field(default_factory=set)
    """Stages, images or named contexts this stage reads (FROM, COPY --from, RUN --mount from=)."""


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def _flags(args: str) -> tuple[dict[str, str], list[str]]:
    """``--name=value`` flags (the last of a name wins; --mount values keep their commas) and the rest."""
    flags: dict[str, str] = {}
    rest: list[str] = []
    words = args.split()
    for i, word in enumerate(words):
        if word.startswith("--") and not rest:
            name, _, value = word[2:].partition("=")
            flags[name] = value if name != "mount" else flags.get("mount", "") + ";" + value
        else:
            rest = words[i:]
            break
    return flags, rest


def parse_stages(text: str) -> list[Stage]:
    """The stages of a Dockerfile with what each one reads (enough for the content key, not a full parser)."""
    stages: list[Stage] = []
    for line in _logical_lines(text):
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            flags, words = _flags(args)
            base = words[0] if words else ""
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(name=name, base=base, uses={base}))
            continue
        if not stages:
            continue
        stage = stages[-1]
        if keyword in ("COPY", "ADD"):
            flags, words = _flags(args)
            if words and words[0].startswith("["):
                words = json.loads(" ".join(words))
            if "from" in flags:
                stage.uses.add(flags["from"])
            else:
                stage.sources.extend(words[:-1])
        elif keyword == "RUN":
            flags, _ = _flags(args)
            for mount in filter(None, flags.get("mount", "").split(";")):
                options = dict(part.partition("=")[::2] for part in mount.split(","))
                if options.get("type", "bind") != "bind":
                    continue
                if "from" in options:
                    stage.uses.add(options["from"])
                else:
                    stage.sources.append(options.get("source", "."))
    return stages


def target_closure(stages: Sequence[Stage], target: str | None) -> tuple[list[Stage], set[str]]:
    """The stages a target needs (itself first) and the external names it reads (images, named contexts)."""
    by_name = {s.name: s for s in stages}
    start = by_name[target] if target else stages[-1]
    needed: list[Stage] = []
    external: set[str] = set()
    todo = [start]
    while todo:
        stage = todo.pop()
        if stage in needed:
            continue
        needed.append(stage)
        for used in sorted(stage.uses):
            if used in by_name and by_name[used] is not stage:
                todo.append(by_name[used])
            elif used not in by_name:
                external.add(used)
    return needed, external


def target_sources(text: str, target: str | None) -> list[str]:
    """The build-context paths a target's stages copy, normalised (``./api/`` -> ``api``; ``.`` is all)."""
    needed, _ = target_closure(parse_stages(text), target)
    sources = {os.path.normpath(src).lstrip("/") for stage in needed for src in stage.sources}
    return sorted(sources)


def dockerignore_patterns(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def dockerignore_admits(rel: str, patterns: Sequence[str]) -> bool:
    """Docker's rule: the last matching pattern wins; ``!`` re-admits; a directory's pattern covers its files."""
    admitted = True
    parts = rel.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        negate = pattern.startswith("!")
        glob = (pattern[1:] if negate else pattern).strip("/")
        if glob.startswith("**/"):
            hit = any(fnmatch.fnmatch(part, glob[3:]) for part in parts)
        else:
            hit = any(fnmatch.fnmatch(prefix, glob) for prefix in prefixes)
        if hit:
            admitted = negate
    return admitted


def select_context_files(files: Iterable[str], sources: Sequence[str], patterns: Sequence[str]) -> list[str]:
    """The files (relative paths) that the sources name and .dockerignore lets into the context."""

    def named(rel: str) -> bool:
        return any(
            src == "." or rel == src or rel.startswith(src + "/") or fnmatch.fnmatch(rel, src) for src in sources
        )

    return sorted(rel for rel in files if named(rel) and dockerignore_admits(rel, patterns))
