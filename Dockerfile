# syntax=docker/dockerfile:1
# The Trainhook image: `trainhook serve` (the admission webhook) and `trainhook sweep` (the
# sweeper), as the Helm chart in charts/trainhook runs them.
#   docker build -t ghcr.io/trainhook/trainhook:0.1.0 .

# Both stages use the same interpreter, so the virtualenv built in the first runs in the second;
# the first is the full image for its C compiler, which compiles the admission path (setup.py).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG BUILD_IMAGE=python:3.11-bookworm

FROM ${BUILD_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/trainhook
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE ./
COPY webhook ./webhook
# Every dependency ships wheels; only Trainhook's admission path is compiled (mypyc, asked for by
# TRAINHOOK_COMPILE=1; setup.py), with mypy and setuptools installed for that build and removed
# after it. `make bench` measures this same build. pip byte-compiles the other modules here,
# because the running container's root filesystem is read-only.
RUN /opt/trainhook/bin/pip install --only-binary=:all: 'setuptools>=77' 'mypy==2.4.1' 'orjson>=3.10' 'msgspec>=0.19' \
    && TRAINHOOK_COMPILE=1 /opt/trainhook/bin/pip install --no-build-isolation --only-binary=:all: . \
    && /opt/trainhook/bin/pip uninstall --yes mypy mypy_extensions pathspec librt ast-serialize pip setuptools

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="trainhook" \
      org.opencontainers.image.description="Mutating admission webhook and sweeper for distributed training jobs" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/trainhook/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN groupadd --system --gid 10001 trainhook \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin trainhook
COPY --from=build /opt/trainhook /opt/trainhook
USER 10001:10001
EXPOSE 8443
ENTRYPOINT ["trainhook"]
CMD ["serve"]
