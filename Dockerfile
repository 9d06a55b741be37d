# Two stages: build a virtualenv from the lock (exact versions, hashes checked), then copy
# only that virtualenv into a slim image that runs the gateway as a non-root user, config
# mounted at /etc/gateway/gateway.yaml.
FROM python:3.11-slim AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/gateway
WORKDIR /src
COPY requirements-runtime.lock ./
# (pip pinned first: the venv's own refuses the hash-pinned lock when an extra of a
# dependency has a newer release than the pin; see the Makefile)
RUN /opt/gateway/bin/pip install pip==26.3 \
 && /opt/gateway/bin/pip install --require-hashes -r requirements-runtime.lock
COPY pyproject.toml README.md ./
COPY gateway ./gateway
RUN /opt/gateway/bin/pip install --no-deps . \
 && /opt/gateway/bin/python -m gateway.runtime_data

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    PATH=/opt/gateway/bin:$PATH

COPY --from=build /opt/gateway /opt/gateway
COPY configs/docker.yaml /etc/gateway/gateway.yaml
RUN useradd --system --uid 10001 --home-dir /app gateway \
 && mkdir -p /app /var/lib/gateway && chown gateway /var/lib/gateway && chmod 700 /var/lib/gateway
WORKDIR /app

USER gateway
EXPOSE 4000
VOLUME ["/var/lib/gateway"]
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:4000/healthz', timeout=2).status == 200 else 1)"

# The default config (configs/docker.yaml) takes the client key from GATEWAY_KEY:
#   docker run -e GATEWAY_KEY=... -e OPENAI_API_KEY=... -p 4000:4000 llm-repair-gateway
# Mount your own at /etc/gateway/gateway.yaml (keep api_keys: [os.environ/GATEWAY_KEY] and
# sessions.data_dir: /var/lib/gateway). Serving on 0.0.0.0 without client keys is refused.
CMD ["gateway", "serve", "--config", "/etc/gateway/gateway.yaml", "--host", "0.0.0.0", "--port", "4000"]
