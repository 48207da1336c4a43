"""The pure parts of ``make images`` (dockyard_localcluster.images): which files a Dockerfile target reads,
and the content key that decides whether an image is built again. No podman needed."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from dockyard_localcluster import images

ROOT = Path(__file__).resolve().parents[3]

DOCKERFILE = """\
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
FROM ${PYTHON_IMAGE} AS build
COPY pyproject.toml README.md ./
COPY api ./api
RUN pip wheel --wheel-dir /wheels .

FROM build AS extra-build
COPY ["operator", "./operator"]

FROM ${PYTHON_IMAGE} AS engine
RUN --mount=type=bind,from=engine-wheels,target=/w \\
    pip install /w/x.whl

FROM ${PYTHON_IMAGE} AS runtime
RUN --mount=type=bind,from=extra-build,source=/wheels,target=/wheels pip install /wheels/*.whl
CMD ["python"]
"""


def test_target_sources_follow_from_mounts_and_stage_bases() -> None:
    # runtime mounts extra-build, which is FROM build: the COPYs of both stages
    assert images.target_sources(DOCKERFILE, None) == ["README.md", "api", "operator", "pyproject.toml"]
    assert images.target_sources(DOCKERFILE, "build") == ["README.md", "api", "pyproject.toml"]
    assert images.target_sources(DOCKERFILE, "engine") == []  # reads only the named context


def test_target_closure_names_the_external_inputs() -> None:
    stages = images.parse_stages(DOCKERFILE)
    needed, external = images.target_closure(stages, "engine")
    assert [s.name for s in needed] == ["engine"]
    assert external == {"${PYTHON_IMAGE}", "engine-wheels"}


def test_the_repository_dockerfile_targets() -> None:
    text = (ROOT / "Dockerfile").read_text()
    for target in (None, "runtime", "ct2-server"):
        assert images.target_sources(text, target) == ["README.md", "api", "operator", "pyproject.toml"]
    # nothing from the project: llama-server comes from its named context, so source changes keep the image
    assert images.target_sources(text, "llama-cpp") == []
    _, external = images.target_closure(images.parse_stages(text), "llama-cpp")
    assert external == {"${PYTHON_IMAGE}", "llama-server"}


def test_select_context_files_applies_dockerignore() -> None:
    patterns = images.dockerignore_patterns((ROOT / ".dockerignore").read_text())
    files = [
        "pyproject.toml",
        "api/dockyard_api/app.py",
        "api/dockyard_api/__pycache__/app.cpython-311.pyc",
        "operator/dockyard_operator/kube.py",
        "docs/install.md",
        "tests/unit/localcluster/test_images.py",
    ]
    assert images.select_context_files(files, ["api", "operator", "pyproject.toml"], patterns) == [
        "api/dockyard_api/app.py",
        "operator/dockyard_operator/kube.py",
        "pyproject.toml",
    ]
    assert images.select_context_files(files, ["."], patterns) == [
        "api/dockyard_api/app.py",
        "operator/dockyard_operator/kube.py",
        "pyproject.toml",
    ]


def _key(root: Path, **overrides: object) -> str:
    rels = images.select_context_files(
        [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()], ["api", "pyproject.toml"], []
    )
    inputs: dict[str, object] = {
        "recipe": DOCKERFILE,
        "target": "runtime",
        "build_args": {"PYTHON_IMAGE": "localhost/dockyard-base:bookworm-abc"},
        "files": images.tree_digests(root, rels),
        "base_id": "1" * 64,
        "extra": {},
    }
    inputs.update(overrides)
    return images.content_key(**inputs)  # type: ignore[arg-type]


@pytest.fixture
def context(tmp_path: Path) -> Path:
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "m.py").write_text("x = 1\n")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "notes.md").write_text("not copied\n")
    return tmp_path


def test_same_inputs_same_key(context: Path) -> None:
    key = _key(context)
    assert key == _key(context)
    assert len(key) == images.KEY_LENGTH
    assert int(key, 16) >= 0  # hex


def test_a_changed_copied_file_changes_the_key(context: Path) -> None:
    before = _key(context)
    (context / "api" / "m.py").write_text("x = 2\n")
    assert _key(context) != before


def test_a_new_copied_file_and_an_executable_bit_change_the_key(context: Path) -> None:
    before = _key(context)
    (context / "api" / "n.py").write_text("")
    after_new = _key(context)
    assert after_new != before
    (context / "api" / "n.py").chmod(0o755)
    assert _key(context) != after_new


def test_a_file_the_target_does_not_copy_keeps_the_key(context: Path) -> None:
    before = _key(context)
    (context / "notes.md").write_text("changed\n")
    assert _key(context) == before


@pytest.mark.parametrize(
    "override",
    [
        {"build_args": {"PYTHON_IMAGE": "localhost/dockyard-base:bookworm-abc", "CT2_EXTRAS": "ct2"}},
        {"build_args": {"PYTHON_IMAGE": "localhost/dockyard-base:bookworm-def"}},
        {"target": "ct2-server"},
        {"recipe": DOCKERFILE + "EXPOSE 8080\n"},
        {"base_id": "2" * 64},
        {"extra": {"context:engine-wheels/llama_cpp_python-0.3.36-cp311-cp311-linux_x86_64.whl": "ab"}},
    ],
)
def test_every_other_input_changes_the_key(context: Path, override: dict[str, object]) -> None:
    assert _key(context, **override) != _key(context)


def test_key_ignores_the_order_of_mappings() -> None:
    a = images.content_key(recipe="r", build_args={"A": "1", "B": "2"}, files={"x": "1", "y": "2"})
    b = images.content_key(recipe="r", build_args={"B": "2", "A": "1"}, files={"y": "2", "x": "1"})
    assert a == b


def test_plan_result_is_the_fixed_tag_for_pause_and_coredns() -> None:
    plan = images.Plan("pause", "localhost/pause", "k" * 16, aliases=(images.PAUSE_VERSION, "dev"))
    assert plan.result == "localhost/pause:3.10.2"
    assert plan.ref == "localhost/pause:" + "k" * 16
    assert images.Plan("dockyard", "localhost/dockyard", "abc").result == "localhost/dockyard:abc"


def test_dependencies_and_unknown_names() -> None:
    assert images._with_dependencies(["tool"]) == ["dockyard", "tool"]
    assert images._with_dependencies(["coredns", "pause"]) == ["pause", "coredns"]
    with pytest.raises(ValueError, match="unknown image"):
        images._with_dependencies(["nginx"])


def test_archive_manifest_digest_reads_index_json(tmp_path: Path) -> None:
    index = {"schemaVersion": 2, "manifests": [{"digest": "sha256:" + "a" * 64, "size": 1}]}
    path = tmp_path / "x.tar"
    with tarfile.open(path, "w") as tar:
        data = json.dumps(index).encode()
        info = tarfile.TarInfo("index.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    assert images.archive_manifest_digest(path) == "sha256:" + "a" * 64
