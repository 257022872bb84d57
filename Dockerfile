# pilothouse: the HTTP service (REST, SSE, OpenAI-compatible, JSON-RPC).
# Built and run by compose.yaml with PostgreSQL (pgvector) and Redis; see
# docs/operations.md. No model weights are baked in: the catalog names the
# providers (a local llama.cpp model needs the "local" extra and its files).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

# bubblewrap: the sandbox catalog script tools run in (docs/tools.md).
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY src ./src
COPY examples ./examples
RUN pip install ".[postgres,openai,anthropic,otel,redis,knowledge]"

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
