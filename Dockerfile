# syntax=docker/dockerfile:1
# pilothouse: the HTTP service (REST, SSE, OpenAI-compatible, JSON-RPC).
# Built and run by compose.yaml with PostgreSQL (pgvector) and Redis; see
# docs/operations.md ("Containers"): `docker compose build` or
# `docker build -t pilothouse .` (BuildKit, Docker 23 or later).
#
# Two stages. The builder has the compilers and builds every wheel once,
# llama-cpp-python's from source (PyPI has no wheel of it); the runtime stage
# has no compiler and installs only those wheels, so the image keeps neither
# the toolchain nor a build tree.

FROM python:3.11-slim AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    # llama.cpp for any CPU of the architecture, not only the build machine's.
    CMAKE_ARGS=-DGGML_NATIVE=OFF

RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /build
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --wheel-dir /wheels ".[postgres,openai,anthropic,otel,redis,knowledge]"

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# bubblewrap: the sandbox catalog script tools run in (docs/tools.md); it
# needs the container to allow user namespaces (compose.yaml's security_opt).
# libgomp1, libstdc++6: the runtime libraries llama.cpp's wheel links against.
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap libgomp1 libstdc++6 \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY examples ./examples
# The builder's wheels are mounted for this step only: no layer keeps them.
# --no-index and --only-binary: nothing is downloaded and nothing compiled.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --only-binary=:all: --find-links /wheels "pilothouse[postgres,openai,anthropic,otel,redis,knowledge]"

RUN useradd --create-home --uid 10001 pilothouse
USER pilothouse

EXPOSE 8000
# /readyz: 200 once the database answers and its schema is current.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=2).status != 200)"

# SIGTERM (docker stop): running turns get --grace seconds, then are recorded
# TE and answered 503; give docker stop a longer timeout (compose: stop_grace_period).
STOPSIGNAL SIGTERM
CMD ["pilothouse", "serve", "--host", "0.0.0.0", "--port", "8000", "--workers", "2", "--grace", "20"]
