# Slim image: the gateway as a non-root user, config mounted at /etc/gateway/gateway.yaml.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True

WORKDIR /app
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY configs/docker.yaml /etc/gateway/gateway.yaml
RUN pip install --no-cache-dir . \
 && useradd --system --uid 10001 --home-dir /app gateway \
 && mkdir -p /var/lib/gateway && chown gateway /var/lib/gateway && chmod 700 /var/lib/gateway

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
