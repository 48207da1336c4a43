# The Dockyard image: the operator (`python -m dockyard_operator`) and the facade
# (`python -m dockyard_api`); the Helm chart sets the command of each Deployment.
#
#   docker build -t ghcr.io/dockyard-dev/dockyard:0.1.0 .
#
# And the image of Dockyard's CTranslate2 server (the runtime catalog's `ctranslate2` entry), the
# target ct2-server: `dockyard-ct2-server` with CTranslate2, tokenizers and cuBLAS for NVIDIA GPUs.
#
#   docker build --target ct2-server -t ghcr.io/dockyard-dev/dockyard-ct2-server:0.1.0 .
#
# Stage 1 builds wheels (Dockyard's own and every dependency, pinned in pyproject.toml); stage 2 is
# a slim runtime that installs them from that local directory only, removes pip/setuptools/wheel and
# runs as a numeric non-root user. How this file is checked without a container engine:
# docs/install.md ("The image").

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY api ./api
COPY operator ./operator
RUN pip wheel --wheel-dir /wheels --prefer-binary .

# The CTranslate2 server's wheels: the same project with its ct2 and ct2-gpu extras.
FROM build AS ct2-build
RUN pip wheel --wheel-dir /wheels --prefer-binary ".[ct2,ct2-gpu]"

FROM ${PYTHON_IMAGE} AS ct2-server
ARG DOCKYARD_VERSION=0.1.0
LABEL org.opencontainers.image.title="dockyard-ct2-server" \
      org.opencontainers.image.description="Dockyard's OpenAI-compatible CTranslate2 server" \
      org.opencontainers.image.version="${DOCKYARD_VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
# CTranslate2 loads libcublas.so.12 at run time; the nvidia-cublas-cu12 wheel puts it here.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    LD_LIBRARY_PATH=/usr/local/lib/python3.11/site-packages/nvidia/cublas/lib
RUN groupadd --system --gid 10001 dockyard \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin dockyard
RUN --mount=type=bind,from=ct2-build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels "dockyard[ct2,ct2-gpu]==${DOCKYARD_VERSION}" \
    && pip uninstall --yes setuptools wheel pip
USER 10001:10001
EXPOSE 8000
# The operator passes the flags (runtimes.ctranslate2_args); docs/runtimes.md lists them.
ENTRYPOINT ["dockyard-ct2-server"]
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
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --system --gid 10001 dockyard \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin dockyard
# The wheels are bind-mounted from the build stage, so they never become a layer of this image.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels "dockyard==${DOCKYARD_VERSION}" \
    && pip uninstall --yes setuptools wheel pip
USER 10001:10001
EXPOSE 8080 8081 9443
CMD ["python", "-m", "dockyard_api"]
