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

The package's modules: :mod:`~.dockerfile` (the Dockerfile's stages and ``.dockerignore``, pure),
:mod:`~.keys` (the content key and file digests), :mod:`~.store` (podman's image list, the cache
directory, the log), :mod:`~.base` (the mmdebstrap base), :mod:`~.inputs` (llama-server, pause.c,
CoreDNS), :mod:`~.builder` (plans, ``podman build``, :func:`ensure_images`), :mod:`~.containerd`
(archives, ``ctr images import``) and :mod:`~.cli` (``make images``).
"""

from dockyard_localcluster.images.base import (
    APT_CONF,
    APT_SOURCES,
    BASE_IMAGE,
    BASE_PACKAGES,
    BASE_SUITE,
    apt_source_files,
    base_key,
    ensure_base,
)
from dockyard_localcluster.images.builder import (
    COREDNS_CONTAINERFILE,
    COREDNS_FILE_CAPABILITIES,
    NAMES,
    PAUSE_CONTAINERFILE,
    TOOL_CONTAINERFILE,
    TOOL_PORT,
    Plan,
    Planner,
    _with_dependencies,
    build,
    ensure_images,
    git_files,
    prune_superseded,
    repo_root,
)
from dockyard_localcluster.images.cli import main
from dockyard_localcluster.images.containerd import (
    archive,
    archive_manifest_digest,
    containerd_images,
    load_into_containerd,
)
from dockyard_localcluster.images.dockerfile import (
    Stage,
    dockerignore_admits,
    dockerignore_patterns,
    parse_stages,
    select_context_files,
    target_closure,
    target_sources,
)
from dockyard_localcluster.images.inputs import (
    COREDNS_VERSION,
    KUBE_VERSION,
    LLAMA_CPP_PYTHON_VERSION,
    PAUSE_VERSION,
    build_pause,
    coredns_binary,
    go_env,
    llama_server_context,
    pause_source,
)
from dockyard_localcluster.images.keys import (
    KEY_LABEL,
    KEY_LENGTH,
    content_key,
    file_digest,
    tree_digests,
)
from dockyard_localcluster.images.store import (
    Store,
    images_dir,
    log,
)

__all__ = [
    "APT_CONF",
    "APT_SOURCES",
    "BASE_IMAGE",
    "BASE_PACKAGES",
    "BASE_SUITE",
    "COREDNS_CONTAINERFILE",
    "COREDNS_FILE_CAPABILITIES",
    "COREDNS_VERSION",
    "KEY_LABEL",
    "KEY_LENGTH",
    "KUBE_VERSION",
    "LLAMA_CPP_PYTHON_VERSION",
    "NAMES",
    "PAUSE_CONTAINERFILE",
    "PAUSE_VERSION",
    "TOOL_CONTAINERFILE",
    "TOOL_PORT",
    "Plan",
    "Planner",
    "Stage",
    "Store",
    "_with_dependencies",
    "apt_source_files",
    "archive",
    "archive_manifest_digest",
    "base_key",
    "build",
    "build_pause",
    "containerd_images",
    "content_key",
    "coredns_binary",
    "dockerignore_admits",
    "dockerignore_patterns",
    "ensure_base",
    "ensure_images",
    "file_digest",
    "git_files",
    "go_env",
    "images_dir",
    "llama_server_context",
    "load_into_containerd",
    "log",
    "main",
    "parse_stages",
    "pause_source",
    "prune_superseded",
    "repo_root",
    "select_context_files",
    "target_closure",
    "target_sources",
    "tree_digests",
]
