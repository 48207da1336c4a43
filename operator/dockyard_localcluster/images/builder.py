"""Plans and builds: how each logical image is built (a target of the repository's Dockerfile with its
build arguments and named contexts, or a small Containerfile in a scratch directory), its content key,
and ``podman build`` of the images whose key tag is missing, under a lock, with the older key tags
untagged; :func:`ensure_images` returns logical name -> reference."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from dockyard_localcluster.images.base import ensure_base
from dockyard_localcluster.images.dockerfile import dockerignore_patterns, select_context_files, target_sources
from dockyard_localcluster.images.inputs import (
    COREDNS_VERSION,
    LLAMA_CPP_PYTHON_VERSION,
    PAUSE_VERSION,
    build_pause,
    coredns_binary,
    llama_server_context,
    pause_source,
)
from dockyard_localcluster.images.keys import KEY_LABEL, KEY_LENGTH, content_key, file_digest, tree_digests
from dockyard_localcluster.images.store import Store, images_dir, log
from dockyard_localcluster.podman import build_volumes, env, podman

NAMES = ("dockyard", "ct2-server", "llama-cpp", "tool", "pause", "coredns")

TOOL_PORT = 8080
TOOL_CONTAINERFILE = """\
FROM {base}
EXPOSE {port}
CMD ["python", "-m", "dockyard_localcluster", "toolserver", "--host", "0.0.0.0", "--port", "{port}"]
"""
PAUSE_CONTAINERFILE = """\
FROM scratch
COPY pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]
"""
COREDNS_FILE_CAPABILITIES = "cap_net_bind_service=+ep"
COREDNS_CONTAINERFILE = """\
FROM scratch
COPY coredns /coredns
USER 65532:65532
EXPOSE 53 53/udp
ENTRYPOINT ["/coredns"]
"""


def repo_root() -> Path:
    """The checkout whose Dockerfile is built: DOCKYARD_REPO, else the one holding this file."""
    if os.environ.get("DOCKYARD_REPO"):
        return Path(os.environ["DOCKYARD_REPO"])
    for parent in Path(__file__).resolve().parents:
        if (parent / "Dockerfile").is_file() and (parent / "pyproject.toml").is_file():
            return parent
    raise FileNotFoundError("no Dockerfile above dockyard_localcluster; set DOCKYARD_REPO")


@dataclass
class Plan:
    """How to build one image: a Dockerfile target of the repository, or a Containerfile in a scratch dir."""

    name: str
    image: str
    key: str
    recipe_path: Path | None = None
    """The repository's Dockerfile (context: the repository), or None for ``containerfile``."""
    containerfile: str = ""
    context_files: dict[str, Path] = field(default_factory=dict)
    """Files copied into the scratch context of a Containerfile build."""
    target: str | None = None
    build_args: dict[str, str] = field(default_factory=dict)
    build_contexts: dict[str, Path] = field(default_factory=dict)
    aliases: tuple[str, ...] = ("dev",)
    needs_network: bool = True

    @property
    def ref(self) -> str:
        return f"{self.image}:{self.key}"

    @property
    def result(self) -> str:
        """The reference ensure_images returns: the key tag, or the fixed tag that others expect."""
        return f"{self.image}:{self.aliases[0]}" if self.aliases[0] != "dev" else self.ref


def git_files(root: Path) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return [rel for rel in out.split("\0") if rel]


class Planner:
    def __init__(self, store: Store, root: Path | None = None) -> None:
        self.store = store
        self.root = root or repo_root()
        self.dockerfile = (self.root / "Dockerfile").read_text()
        ignore = self.root / ".dockerignore"
        self.patterns = dockerignore_patterns(ignore.read_text()) if ignore.is_file() else []
        self._files: list[str] | None = None
        self._digests: dict[str, str] = {}
        self._base: str | None = None

    def base(self) -> str:
        if self._base is None:
            self._base = ensure_base(self.store)
        return self._base

    def context_digests(self, target: str | None) -> dict[str, str]:
        if self._files is None:
            self._files = git_files(self.root)
        rels = select_context_files(self._files, target_sources(self.dockerfile, target), self.patterns)
        missing = [rel for rel in rels if rel not in self._digests]
        self._digests.update(tree_digests(self.root, missing))
        return {rel: self._digests[rel] for rel in rels if rel in self._digests}

    def dockerfile_plan(
        self,
        name: str,
        image: str,
        target: str | None,
        build_args: Mapping[str, str] | None = None,
        build_contexts: Mapping[str, Path] | None = None,
    ) -> Plan:
        base = self.base()
        # no compiler installed inside the build (the test bed fetches nothing inside one): the C extension is left
        # out, its Python form runs (the Dockerfile's BUILD_PACKAGES)
        args = {"PYTHON_IMAGE": base, "BUILD_PACKAGES": "", **(build_args or {})}
        contexts = dict(build_contexts or {})
        extra = {
            f"context:{ctx}/{p.name}": file_digest(p)
            for ctx, directory in sorted(contexts.items())
            for p in sorted(directory.iterdir())
            if p.is_file()
        }
        key = content_key(
            recipe=self.dockerfile,
            target=target,
            build_args=args,
            files=self.context_digests(target),
            base_id=self.store.id_of(base) or self.store.refresh(base),
            extra=extra,
        )
        return Plan(name, image, key, self.root / "Dockerfile", target=target, build_args=args, build_contexts=contexts)

    def plan(self, name: str, built: Mapping[str, Plan]) -> Plan:
        if name == "dockyard":
            return self.dockerfile_plan(name, "localhost/dockyard", None)
        if name == "ct2-server":
            # CPU only: the ct2-gpu extra (nvidia-cublas-cu12, ~600 MB) is the build argument's default
            return self.dockerfile_plan(name, "localhost/dockyard-ct2-server", "ct2-server", {"CT2_EXTRAS": "ct2"})
        if name == "llama-cpp":
            return self.dockerfile_plan(
                name,
                "localhost/dockyard-llama-cpp",
                "llama-cpp",
                {"LLAMA_CPP_PYTHON_VERSION": LLAMA_CPP_PYTHON_VERSION},
                {"llama-server": llama_server_context()},
            )
        if name == "tool":
            base = built["dockyard"].ref
            recipe = TOOL_CONTAINERFILE.format(base=base, port=TOOL_PORT)
            base_id = self.store.id_of(base) or self.store.refresh(base)
            return Plan(
                name,
                "localhost/dockyard-tool",
                content_key(recipe=recipe, base_id=base_id),
                containerfile=recipe,
                needs_network=False,
            )
        if name == "pause":
            source = pause_source()
            gcc = subprocess.run(["gcc", "--version"], check=True, capture_output=True, text=True).stdout
            key = content_key(
                recipe=PAUSE_CONTAINERFILE,
                files={"pause.c": file_digest(source)},
                extra={"gcc": gcc.splitlines()[0], "version": PAUSE_VERSION},
            )
            return Plan(
                name,
                "localhost/pause",
                key,
                containerfile=PAUSE_CONTAINERFILE,
                context_files={"pause.c": source},
                aliases=(PAUSE_VERSION, "dev"),
                needs_network=False,
            )
        if name == "coredns":
            go = subprocess.run(["go", "version"], check=True, capture_output=True, text=True).stdout.strip()
            extra = {"go": go, "coredns": COREDNS_VERSION, "file-capabilities": COREDNS_FILE_CAPABILITIES}
            key = content_key(recipe=COREDNS_CONTAINERFILE, extra=extra)
            return Plan(
                name,
                "localhost/coredns",
                key,
                containerfile=COREDNS_CONTAINERFILE,
                aliases=(COREDNS_VERSION, "dev"),
                needs_network=False,
            )
        raise ValueError(f"unknown image {name!r}; one of {', '.join(NAMES)}")


def build(plan: Plan, store: Store) -> None:
    tags = [plan.ref, *(f"{plan.image}:{alias}" for alias in plan.aliases)]
    common = ["build", "--pull=never", "--label", f"{KEY_LABEL}={plan.key}"]
    for tag in tags:
        common += ["-t", tag]
    if plan.recipe_path is not None:
        args = [*common, "--network", "host", *build_volumes(), "-f", str(plan.recipe_path)]
        if plan.target:
            args += ["--target", plan.target]
        for name, value in plan.build_args.items():
            args += ["--build-arg", f"{name}={value}"]
        # buildah 1.28 reuses a cached `RUN --mount=type=bind,from=<stage>` after that stage changed; the
        # Dockerfile declares CACHE_KEY before those steps, so the key makes them run again when it changes
        args += ["--build-arg", f"CACHE_KEY={plan.key}"]
        for name, path in plan.build_contexts.items():
            args += ["--build-context", f"{name}={path}"]
        _podman_build(plan, [*args, str(plan.recipe_path.parent)])
    else:
        with tempfile.TemporaryDirectory(dir=images_dir(), prefix=f".{plan.name}-") as work:
            context = Path(work)
            (context / "Containerfile").write_text(plan.containerfile)
            if plan.name == "pause":
                build_pause(plan.context_files["pause.c"], context / "pause")
            elif plan.name == "coredns":
                shutil.copy2(coredns_binary(), context / "coredns")
                # as in the official image: the non-root server may bind port 53 (COPY keeps the xattr)
                subprocess.run(["setcap", COREDNS_FILE_CAPABILITIES, str(context / "coredns")], check=True)
            _podman_build(plan, [*common, "--network", "none", "-f", str(context / "Containerfile"), str(context)])
    image_id = store.refresh(plan.ref)
    for tag in tags:
        store.ids[tag] = image_id
    prune_superseded(plan, store)


def _podman_build(plan: Plan, args: Sequence[str]) -> None:
    """``podman build`` with its output in ``~/.cache/dockyard/images/logs/<name>.log`` (the tail on failure)."""
    logs = images_dir() / "logs"
    logs.mkdir(exist_ok=True)
    path = logs / f"{plan.name}.log"
    with path.open("wb") as out:
        proc = subprocess.run(["podman", *args], env=env(), stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = path.read_text(errors="replace").splitlines()[-40:]
        raise RuntimeError(f"podman build of {plan.name} failed ({path}):\n" + "\n".join(tail))


def prune_superseded(plan: Plan, store: Store) -> None:
    """Untag the older content-key tags of the image (their layers stay while anything uses them)."""
    old = [
        ref
        for ref in store.ids
        if ref.startswith(plan.image + ":")
        and re.fullmatch(f"[0-9a-f]{{{KEY_LENGTH}}}", ref.rpartition(":")[2])
        and ref != plan.ref
        and store.ids[ref] != store.ids[plan.ref]
    ]
    if old:
        podman("rmi", *old, check=False)
        for ref in old:
            store.ids.pop(ref, None)


@contextmanager
def _lock() -> Iterator[None]:
    with (images_dir() / ".lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _with_dependencies(names: Iterable[str]) -> list[str]:
    wanted = set(names)
    unknown = wanted - set(NAMES)
    if unknown:
        raise ValueError(f"unknown image(s) {', '.join(sorted(unknown))}; one of {', '.join(NAMES)}")
    if "tool" in wanted:
        wanted.add("dockyard")
    return [name for name in NAMES if name in wanted]


def ensure_images(names: Iterable[str] | None = None) -> dict[str, str]:
    """Build the images that are missing; return logical name -> image reference.

    ``names`` defaults to all of :data:`NAMES`. References are ``localhost/<image>:<content key>``
    (also tagged ``:dev``), except ``pause`` (``localhost/pause:3.10.2``, containerd's sandbox_image) and
    ``coredns`` (``localhost/coredns:<version>``), which also carry their key tags.
    """
    requested = list(NAMES if names is None else names)
    refs: dict[str, str] = {}
    with _lock():
        store = Store()
        planner = Planner(store)
        plans: dict[str, Plan] = {}
        ordered = _with_dependencies(requested)
        if set(ordered) & {"dockyard", "ct2-server", "llama-cpp"}:
            planner.base()  # timed and logged on its own
        for name in ordered:
            started = time.monotonic()
            plan = planner.plan(name, plans)
            plans[name] = plan
            if store.id_of(plan.ref):
                store.tag(plan.ref, *(f"{plan.image}:{alias}" for alias in plan.aliases))
                state = "cached"
            else:
                log(f"{name}: building {plan.ref}")
                build(plan, store)
                state = "built"
            refs[name] = plan.result
            log(f"{name}: {state} in {time.monotonic() - started:.1f}s  {plan.result}")
    return {name: refs[name] for name in requested}
