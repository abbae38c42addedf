# syntax=docker/dockerfile:1.7
# agentr images. One Dockerfile, three targets (docker-compose.yml picks one per service):
#
#   base    python:3.11-slim + agentr WITHOUT torch: api, relay, splice, migrate (small, CPU only)
#   ml      base + torch (CPU or CUDA wheels, build arg TORCH_VARIANT) + transformers and the rest of
#           the `ml` extra, plus Java 17 for ScienceWorld: search, critic, train, trainer
#   flower  base + Flower, the Celery monitoring UI (compose profile `flower`)
#
# Every target runs as the non-root user `agentr` (uid 10001) with AGENTR_HOME=/data, the volume
# that holds model folders, checkpoints and dataset files shared by the services.
#
#   docker build --target base -t agentr:base .
#   docker build --target ml --build-arg TORCH_VARIANT=cu128 -t agentr:ml-cuda .

ARG PYTHON_VERSION=3.11

# ------------------------------------------------------------------------------------------------
FROM python:${PYTHON_VERSION}-slim AS base

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    AGENTR_HOME=/data \
    AGENTR_MIGRATIONS=/app/migrations

RUN groupadd --system --gid 10001 agentr \
 && useradd --system --uid 10001 --gid agentr --home-dir /home/agentr --create-home agentr \
 && mkdir -p /data /app \
 && chown agentr:agentr /data

WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY agentr ./agentr
COPY core ./core
COPY api ./api
COPY search_service ./search_service
COPY critic_service ./critic_service
COPY splice_service ./splice_service
COPY train_service ./train_service
COPY migrations ./migrations
# The core install: FastAPI, SQLAlchemy/asyncpg, redis, Celery, pyarrow (Parquet downloads)... and
# no torch. Byte-compiled here (pip's default): with PYTHONDONTWRITEBYTECODE nothing is cached at
# run time, and without .pyc files every `agentr` call (each healthcheck) compiles its imports
# again: 18 s instead of 6 s for `agentr health` on 2 busy cores (compose check).
RUN pip install . && agentr --help >/dev/null

USER agentr
VOLUME ["/data"]
EXPOSE 8000
CMD ["agentr", "--help"]

# ------------------------------------------------------------------------------------------------
FROM base AS ml

# cpu (default), or a CUDA build such as cu126 / cu128 (the PyTorch wheel index of that name);
# "default" takes the package index's own build (CUDA on linux/x86_64).
ARG TORCH_VARIANT=cpu
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_BASE=https://download.pytorch.org/whl
# ScienceWorld runs a bundled jar: it needs a Java 17 runtime. Set to false to leave Java out.
ARG INSTALL_JAVA=true

USER root
RUN if [ "$INSTALL_JAVA" = "true" ]; then \
      apt-get update \
      && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
      && rm -rf /var/lib/apt/lists/*; \
    fi
# torch first, from the chosen wheel index, so the `ml` extra does not pull a different build.
RUN if [ "$TORCH_VARIANT" = "default" ]; then \
      pip install "torch==${TORCH_VERSION}"; \
    else \
      pip install --index-url "${TORCH_INDEX_BASE}/${TORCH_VARIANT}" "torch==${TORCH_VERSION}"; \
    fi \
 && pip install ".[ml]" \
 && python -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
ENV HF_HOME=/data/hf

USER agentr

# ------------------------------------------------------------------------------------------------
FROM base AS flower

USER root
RUN pip install "flower>=2.0"
USER agentr
EXPOSE 5555
