"""``make images``: every image the Helm chart and the in-cluster tests use, built with podman, no registry.

Images (logical name -> reference ``localhost/<image>:<content key>``, also tagged ``:dev``):

``dockyard``    the repository's Dockerfile, default target ``runtime`` (operator + facade)
``ct2-server``  target ``ct2-server``, CPU only: ``CT2_EXTRAS=ct2`` leaves out the cuBLAS wheel (~600 MB)
``llama-cpp``   target ``llama-cpp``: llama.cpp's own ``llama-server`` (CPU), the binary
                build-llama-server.sh compiles into ``~/.cache/dockyard/llama-server``, never compiled in
                the build
``tool``        the demo tool (:mod:`dockyard_localcluster.toolserver`) on port 8080, FROM ``dockyard``
``pause``       kubelet's sandbox image, ``gcc -static`` of Kubernetes' pause.c: ``localhost/pause:3.10.2``
``coredns``     CoreDNS from the Go module proxy, CGO_ENABLED=0, FROM scratch: ``localhost/coredns:<version>``

The Python images start from a Debian bookworm base made by mmdebstrap from the machine's own apt
sources (``localhost/dockyard-base:bookworm-<key>``), passed as the Dockerfile's ``PYTHON_IMAGE``.

The content key is a short sha256 of everything an image is built from: the Dockerfile text, the target,
the build arguments, the files of the build context that the target's stages copy (tracked and untracked
files git does not ignore, filtered by ``.dockerignore``), the base image's ID and the files of a named
build context. An image whose key tag exists is not built again, so a warm ``make images`` only hashes
and asks podman for its image list. Archives for containerd (``ctr images import``) are cached by image
ID under ``~/.cache/dockyard/images``.
"""

from __future__ import annotations

import fcntl
import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from dockyard_localcluster.podman import build_volumes, cache_root, env, podman, podman_text

KUBE_VERSION = "1.36.3"
PAUSE_VERSION = "3.10.2"
COREDNS_VERSION = "v1.14.2"
"""The CoreDNS that kubeadm v1.36 installs (cmd/kubeadm/app/constants: CoreDNSVersion)."""
LLAMA_CPP_PYTHON_VERSION = os.environ.get("DOCKYARD_LLAMA_CPP_PYTHON_VERSION", "0.3.36")

BASE_IMAGE = "localhost/dockyard-base"
BASE_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates", "tzdata", "libgomp1")
"""python3 (3.11) and venv for the Dockerfile's /opt/dockyard; libgomp1 for llama.cpp's OpenMP threads."""
APT_SOURCES = ("/etc/apt/sources.list", "/etc/apt/sources.list.d")
APT_CONF = Path("/etc/apt/apt.conf.d/99artifact-registry")

KEY_LABEL = "dev.dockyard.content-key"
KEY_LENGTH = 16
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


def log(message: str) -> None:
    print(f"[images] {message}", file=sys.stderr, flush=True)


def repo_root() -> Path:
    """The checkout whose Dockerfile is built: DOCKYARD_REPO, else the one holding this file."""
    if os.environ.get("DOCKYARD_REPO"):
        return Path(os.environ["DOCKYARD_REPO"])
    for parent in Path(__file__).resolve().parents:
        if (parent / "Dockerfile").is_file() and (parent / "pyproject.toml").is_file():
            return parent
    raise FileNotFoundError("no Dockerfile above dockyard_localcluster; set DOCKYARD_REPO")


def images_dir() -> Path:
    path = cache_root() / "images"
    path.mkdir(parents=True, exist_ok=True)
    return path


# --- pure parts: the Dockerfile's stages, .dockerignore, the content key ------------------------------


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


def content_key(
    *,
    recipe: str,
    target: str | None = None,
    build_args: Mapping[str, str] | None = None,
    files: Mapping[str, str] | None = None,
    base_id: str = "",
    extra: Mapping[str, str] | None = None,
) -> str:
    """A short sha256 of everything an image is built from.

    ``recipe`` is the Dockerfile/Containerfile text, ``files`` maps a context path to its content hash,
    ``base_id`` is the base image's ID, ``extra`` anything else (wheel hashes, tool versions).
    """
    document = {
        "recipe": recipe,
        "target": target or "",
        "build_args": dict(sorted((build_args or {}).items())),
        "files": dict(sorted((files or {}).items())),
        "base_id": base_id,
        "extra": dict(sorted((extra or {}).items())),
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:KEY_LENGTH]


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes, plus whether it is executable (COPY keeps the mode)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest() + ("+x" if os.access(path, os.X_OK) else "")


def tree_digests(root: Path, rels: Iterable[str]) -> dict[str, str]:
    return {rel: file_digest(root / rel) for rel in rels if (root / rel).is_file()}


# --- podman's image list ----------------------------------------------------------------------------------


class Store:
    """podman's images, read once (one ``podman images`` call) and updated as images are built."""

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}
        for image in json.loads(podman_text("images", "--format", "json") or "[]"):
            for name in image.get("Names") or []:
                self.ids[name] = image["Id"]

    def id_of(self, ref: str) -> str | None:
        return self.ids.get(ref)

    def refresh(self, ref: str) -> str:
        image_id = podman_text("image", "inspect", "--format", "{{.Id}}", ref)
        self.ids[ref] = image_id
        return image_id

    def tag(self, ref: str, *aliases: str) -> None:
        """Point the aliases at ref's image (skipping those already there)."""
        image_id = self.id_of(ref) or self.refresh(ref)
        stale = [alias for alias in aliases if self.ids.get(alias) != image_id]
        if stale:
            podman("tag", ref, *stale)
            for alias in stale:
                self.ids[alias] = image_id


# --- the base ---------------------------------------------------------------------------------------------


def apt_source_files() -> list[Path]:
    files: list[Path] = []
    for entry in map(Path, APT_SOURCES):
        if entry.is_file():
            files.append(entry)
        elif entry.is_dir():
            files.extend(sorted(p for p in entry.iterdir() if p.suffix in (".list", ".sources") and p.is_file()))
    return [p for p in files if p.read_text().strip()]


def base_key() -> str:
    sources = {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in apt_source_files()}
    if APT_CONF.is_file():
        sources[str(APT_CONF)] = hashlib.sha256(APT_CONF.read_bytes()).hexdigest()
    return content_key(
        recipe="mmdebstrap --variant=minbase",
        build_args={"suite": BASE_SUITE, "include": ",".join(BASE_PACKAGES)},
        extra=sources,
    )[:12]


def ensure_base(store: Store) -> str:
    """The Debian base (``localhost/dockyard-base:bookworm-<key>``), built by mmdebstrap when missing."""
    ref = f"{BASE_IMAGE}:{BASE_SUITE}-{base_key()}"
    if store.id_of(ref):
        return ref
    if not shutil.which("mmdebstrap"):
        raise RuntimeError("mmdebstrap is required for the base image (apt-get install mmdebstrap)")
    started = time.monotonic()
    log(f"base: mmdebstrap {BASE_SUITE} ({', '.join(BASE_PACKAGES)}) from this machine's apt sources")
    with tempfile.TemporaryDirectory(dir=images_dir(), prefix=".base-") as work:
        rootfs = Path(work) / "rootfs.tar"
        command = [
            "mmdebstrap",
            "--quiet",
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            # no apt lists or caches in the image; docs and locales are not needed
            "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-include=/usr/share/doc/*/copyright",
            "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*",
            "--customize-hook=rm -rf $1/var/lib/apt/lists/* $1/var/cache/apt/*",
        ]
        if APT_CONF.is_file():
            command.append(f"--aptopt={APT_CONF}")
        command += [BASE_SUITE, str(rootfs), *map(str, apt_source_files())]
        subprocess.run(["nice", *command], check=True)
        podman(
            "import",
            "--change",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "--change",
            "ENV LANG=C.UTF-8",
            "--change",
            'CMD ["/bin/bash"]',
            str(rootfs),
            ref,
        )
    store.refresh(ref)
    log(f"base: built {ref} in {time.monotonic() - started:.0f}s")
    return ref


# --- the images -------------------------------------------------------------------------------------------


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
        args = {"PYTHON_IMAGE": base, **(build_args or {})}
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


# --- inputs built outside podman: llama-server, pause, CoreDNS -------------------------------------


def llama_server_context() -> Path:
    """A directory holding only llama.cpp's ``llama-server`` binary (the ``llama-server`` build context),
    the one build-llama-server.sh compiles (idempotent: a cached binary means nothing is built)."""
    script = Path(__file__).with_name("build-llama-server.sh")
    proc = subprocess.run(
        ["bash", str(script)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "DOCKYARD_LLAMA_CPP_PYTHON_VERSION": LLAMA_CPP_PYTHON_VERSION},
    )
    directory = Path(proc.stdout.strip().splitlines()[-1])
    binary = directory / "llama-server"
    if not binary.is_file():
        raise RuntimeError(f"build-llama-server.sh made no {binary}")
    return directory


def go_env(name: str) -> str:
    return subprocess.run(["go", "env", name], check=True, capture_output=True, text=True).stdout.strip()


def pause_source() -> Path:
    path = Path(go_env("GOMODCACHE")) / f"k8s.io/kubernetes@v{KUBE_VERSION}/build/pause/linux/pause.c"
    if not path.is_file():
        log(f"go mod download k8s.io/kubernetes@v{KUBE_VERSION} (for pause.c)")
        subprocess.run(
            ["go", "mod", "download", f"k8s.io/kubernetes@v{KUBE_VERSION}"],
            check=True,
            env={**os.environ, "GOFLAGS": "-modcacherw", "GOTOOLCHAIN": "local"},
            cwd=tempfile.gettempdir(),
        )
    return path


def build_pause(source: Path, out: Path) -> None:
    subprocess.run(
        ["gcc", "-Os", "-Wall", "-Werror", "-static", "-s", f"-DVERSION=v{PAUSE_VERSION}", "-o", str(out), str(source)],
        check=True,
    )


def coredns_binary() -> Path:
    """CoreDNS built once per version from the Go module proxy, cached like build-binaries.sh's binaries."""
    directory = cache_root() / f"coredns-{COREDNS_VERSION}"
    binary = directory / "coredns"
    if binary.is_file():
        return binary
    directory.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    log(f"coredns {COREDNS_VERSION}: go install from the module proxy (CGO_ENABLED=0; minutes when cold)")
    jobs = os.environ.get("DOCKYARD_GO_JOBS") or str(os.cpu_count() or 1)
    with tempfile.TemporaryDirectory(dir=directory, prefix=".build-") as gobin:
        subprocess.run(
            [
                "nice",
                "go",
                "install",
                "-p",
                jobs,
                "-trimpath",
                "-ldflags",
                "-s -w",
                f"github.com/coredns/coredns@{COREDNS_VERSION}",
            ],
            check=True,
            cwd=tempfile.gettempdir(),
            env={**os.environ, "GOBIN": gobin, "CGO_ENABLED": "0", "GOFLAGS": "-modcacherw", "GOTOOLCHAIN": "local"},
        )
        Path(gobin, "coredns").rename(binary)
    log(f"coredns {COREDNS_VERSION}: built in {time.monotonic() - started:.0f}s")
    return binary


# --- building -----------------------------------------------------------------------------------------


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


# --- archives and containerd ------------------------------------------------------------------------


def _safe(ref: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", ref)


def archive(ref: str) -> Path:
    """An oci-archive of the image (its name inside is ``ref``), cached by image ID under
    ``~/.cache/dockyard/images/archives/<id>/``; older archives of the same reference are removed."""
    image_id = podman_text("image", "inspect", "--format", "{{.Id}}", ref)
    root = images_dir() / "archives"
    path = root / image_id[:24] / f"{_safe(ref)}.oci.tar"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    podman("save", "--format", "oci-archive", "-o", str(partial), ref)
    partial.rename(path)
    # archives of the same reference, or of images podman no longer holds, are stale
    ids = podman_text("images", "--all", "--quiet", "--no-trunc").split()
    live = {image_id.removeprefix("sha256:")[:24] for image_id in ids}
    for other in root.glob("*/*.oci.tar"):
        if other != path and (other.name == path.name or other.parent.name not in live):
            other.unlink()
    for directory in root.iterdir():
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
    return path


def archive_manifest_digest(path: Path) -> str:
    """The digest of the manifest an oci-archive's index.json names (what containerd records on import)."""
    with tarfile.open(path) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise ValueError(f"{path} has no index.json")
        index = json.load(member)
    return str(index["manifests"][0]["digest"])


def containerd_images(ctr: Path | str, address: str, namespace: str = "k8s.io") -> dict[str, str]:
    """Reference -> digest of the images a containerd holds."""
    out = subprocess.run(
        [str(ctr), "-a", address, "-n", namespace, "images", "ls"], check=True, capture_output=True, text=True
    ).stdout
    images: dict[str, str] = {}
    for line in out.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3 and fields[2].startswith("sha256:"):
            images[fields[0]] = fields[2]
    return images


def load_into_containerd(ctr: Path | str, address: str, refs: Iterable[str], namespace: str = "k8s.io") -> None:
    """Import the images into a containerd (``ctr images import`` of their oci-archives), skipping those it
    already has under the same reference at the same digest."""
    have = containerd_images(ctr, address, namespace)
    for ref in refs:
        started = time.monotonic()
        path = archive(ref)
        digest = archive_manifest_digest(path)
        if have.get(ref) == digest:
            log(f"containerd: {ref} already there ({digest[:19]})")
            continue
        subprocess.run(
            [str(ctr), "-a", address, "-n", namespace, "images", "import", str(path)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        log(f"containerd: imported {ref} in {time.monotonic() - started:.1f}s")


def main(names: Sequence[str] = (), *, archives: bool = False, refs_only: bool = False) -> int:
    """Build what is missing; print ``name<TAB>reference[<TAB>archive]`` per image (or only the references)."""
    started = time.monotonic()
    refs = ensure_images(names or None)
    for name, ref in refs.items():
        path = archive(ref) if archives else None
        if refs_only:
            print(ref)
        else:
            print(f"{name}\t{ref}" + (f"\t{path}" if path else ""))
    log(f"done in {time.monotonic() - started:.1f}s")
    return 0
