# The Dockyard image: the operator (`python -m dockyard_operator`) and the facade
# (`python -m dockyard_api`); the Helm chart sets the command of each Deployment.
#
#   docker build -t ghcr.io/dockyard-dev/dockyard:0.1.0 .
#
# And the image of Dockyard's CTranslate2 server (the runtime catalog's `ctranslate2` entry), the
# target ct2-server: `dockyard-ct2-server` with CTranslate2, tokenizers and cuBLAS for NVIDIA GPUs
# (CT2_EXTRAS=ct2 leaves cuBLAS out: a CPU-only image without the ~600 MB wheel).
#
#   docker build --target ct2-server -t ghcr.io/dockyard-dev/dockyard-ct2-server:0.1.0 .
#
# And llama.cpp's own OpenAI-compatible server, `llama-server` (CPU), the target llama-cpp, the runtime
# catalog's `llama-cpp` entry on CPU nodes and in the test bed: the binary is compiled outside the build
# (operator/dockyard_localcluster/build-llama-server.sh, from the llama.cpp that llama-cpp-python's
# source distribution vendors) and given as the named context llama-server.
#
#   docker build --target llama-cpp \
#     --build-context llama-server=$HOME/.cache/dockyard/llama-server/0.3.36/bin \
#     -t localhost/dockyard-llama-cpp:dev .
#
# Stage 1 builds wheels (Dockyard's own and every dependency, pinned in pyproject.toml); stage 2 is
# a slim runtime that installs them from that local directory only into a virtual environment
# (/opt/dockyard, first on PATH), removes pip/setuptools/wheel and runs as a numeric non-root user.
# PYTHON_IMAGE may be the official Python image or a Debian bookworm with python3 and python3-venv
# (`make images` builds one with mmdebstrap, docs/real-node.md). How this file is checked without a
# container engine: docs/install.md ("The image").

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
# The CTranslate2 server's extras: ct2 (CTranslate2, tokenizers) and ct2-gpu (cuBLAS for NVIDIA GPUs).
ARG CT2_EXTRAS=ct2,ct2-gpu

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/dockyard/bin:$PATH
# A C compiler for Dockyard's two C extensions (the spans of a traced turn, api/dockyard_core/_spans.c; an upload's
# file data from the socket to the disk, api/dockyard_core/_pump.c): built into the project's wheel here, nothing
# of the compiler reaches the runtime stage. BUILD_PACKAGES= (empty) builds without it, and the same code runs in
# Python (the test bed's builds, which fetch nothing inside a build).
ARG BUILD_PACKAGES="gcc libc6-dev"
# hadolint ignore=DL3008,SC2086
RUN if [ -n "$BUILD_PACKAGES" ]; then \
      apt-get update && apt-get install -y --no-install-recommends $BUILD_PACKAGES && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3 -m venv /opt/dockyard
WORKDIR /src
COPY pyproject.toml README.md ./
# The pinned dependencies first: this layer stays cached until pyproject.toml changes.
RUN python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
    > /tmp/requirements.txt \
    && pip wheel --wheel-dir /wheels --prefer-binary --requirement /tmp/requirements.txt
COPY api ./api
COPY operator ./operator
RUN pip wheel --wheel-dir /wheels --prefer-binary --no-deps .

# The CTranslate2 server's wheels: the same project with its ct2 and (by default) ct2-gpu extras.
FROM build AS ct2-build
ARG CT2_EXTRAS
# --find-links: the build stage's wheels of the same pinned versions are used, not fetched again
RUN pip wheel --wheel-dir /wheels --prefer-binary ".[${CT2_EXTRAS}]" --find-links=/wheels

FROM ${PYTHON_IMAGE} AS ct2-server
ARG DOCKYARD_VERSION=0.1.0
ARG CT2_EXTRAS
LABEL org.opencontainers.image.title="dockyard-ct2-server" \
      org.opencontainers.image.description="Dockyard's OpenAI-compatible CTranslate2 server" \
      org.opencontainers.image.version="${DOCKYARD_VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
# CTranslate2 loads libcublas.so.12 at run time; the nvidia-cublas-cu12 wheel puts it here.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/dockyard/bin:$PATH \
    LD_LIBRARY_PATH=/opt/dockyard/lib/python3.11/site-packages/nvidia/cublas/lib
RUN groupadd --system --gid 10001 dockyard \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin dockyard
# podman/buildah (1.28) reuses a cached RUN whose --mount from= stage changed: `make images` passes the
# content key as CACHE_KEY so that it runs again (BuildKit needs no such help; it may stay empty).
ARG CACHE_KEY
RUN --mount=type=bind,from=ct2-build,source=/wheels,target=/wheels \
    python3 -m venv /opt/dockyard \
    && pip install --no-index --find-links=/wheels "dockyard[${CT2_EXTRAS}]==${DOCKYARD_VERSION}" \
    && pip uninstall --yes setuptools wheel pip
USER 10001:10001
EXPOSE 8000
# The operator passes the flags (runtimes.ctranslate2_args); docs/runtimes.md lists them.
ENTRYPOINT ["dockyard-ct2-server"]
CMD ["--help"]

# llama.cpp's own server (llama-server, CPU). Nothing is compiled here: the named context llama-server
# holds the binary build-llama-server.sh made; it needs glibc, libstdc++6, libgcc-s1 and libgomp1.
FROM ${PYTHON_IMAGE} AS llama-cpp
ARG LLAMA_CPP_PYTHON_VERSION=0.3.36
LABEL org.opencontainers.image.title="dockyard-llama-cpp" \
      org.opencontainers.image.description="llama.cpp's OpenAI-compatible server, llama-server (CPU)" \
      org.opencontainers.image.version="${LLAMA_CPP_PYTHON_VERSION}"
# llama.cpp's threads are OpenMP's (libgomp1: in the mmdebstrap base, not in the official Python image)
# hadolint ignore=DL3008
RUN dpkg-query --show libgomp1 >/dev/null 2>&1 \
    || { apt-get update && apt-get install -y --no-install-recommends libgomp1 && rm -rf /var/lib/apt/lists/*; } \
    && groupadd --system --gid 10001 dockyard \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin dockyard
# llama-server is a named build context (--build-context), not a stage of this file
# hadolint ignore=DL3022
COPY --from=llama-server llama-server /usr/local/bin/llama-server
USER 10001:10001
EXPOSE 8080
# The operator passes llama-server's flags (runtimes.llama_cpp_args; docs/runtimes.md lists them).
ENTRYPOINT ["llama-server"]
CMD ["--help"]

# The default target (last stage): the operator and the facade.
FROM ${PYTHON_IMAGE} AS runtime
ARG DOCKYARD_VERSION=0.1.0
LABEL org.opencontainers.image.title="dockyard" \
      org.opencontainers.image.description="Dockyard operator and facade (select with the command)" \
      org.opencontainers.image.version="${DOCKYARD_VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/dockyard/bin:$PATH
RUN groupadd --system --gid 10001 dockyard \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin dockyard
# The wheels are bind-mounted from the build stage, so they never become a layer of this image.
# CACHE_KEY: see the ct2-server stage.
ARG CACHE_KEY
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python3 -m venv /opt/dockyard \
    && pip install --no-index --find-links=/wheels "dockyard==${DOCKYARD_VERSION}" \
    && pip uninstall --yes setuptools wheel pip
USER 10001:10001
EXPOSE 8080 8081 9443
CMD ["python", "-m", "dockyard_api"]
