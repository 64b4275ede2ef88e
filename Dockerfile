# lmd in a container: `lmd serve` as a non-root user, the database in a volume, a healthcheck.
#   docker build -t lmd .
#   docker run -d -p 8420:8420 -v lmd-data:/data \
#     -e LMD_TOKEN=$(openssl rand -hex 24) -e OPENAI_API_KEY=sk-... lmd
# The daemon listens on 0.0.0.0 inside the container and refuses to start without LMD_TOKEN.
# Commands run in a bubblewrap sandbox; Docker's default seccomp profile forbids the user
# namespaces it needs, so under plain `docker run` lmd asks before every command. To let
# read-only commands run at once in the sandbox, add
#     --security-opt seccomp=unconfined --security-opt apparmor=unconfined
# (see docs/sandbox.md); `docker exec lmd lmd doctor` says which case you are in.

FROM python:3.11-slim AS build
# Compilers: the online-Elo bootstrap's loop (plugins/elo/_online.c), llama.cpp's libraries
# (llama-cpp-python, built from source with portable CPU flags) and the embedded model's
# engine, llama-server (daemon/backends/engine_build.py, each compiler step shown). The final
# image gets only the built environment.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc g++ libc6-dev cmake ninja-build \
    && rm -rf /var/lib/apt/lists/*
ENV CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE settings.sql ./
COPY daemon ./daemon
COPY plugins ./plugins
RUN python -m venv /opt/lmd \
    && /opt/lmd/bin/pip install --no-cache-dir '.[embedded]' \
    && /opt/lmd/bin/python -m daemon.backends.engine_build

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LMD_HOME=/data \
    LMD_BIND=0.0.0.0:8420
# bubblewrap: the command sandbox; libgomp1: llama.cpp's threads (the embedded model). Not
# pinned: Debian's security updates replace the versions.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap libgomp1 \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --gid 10001 lmd \
    && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin lmd \
    && mkdir -p /data \
    && chown 10001:10001 /data
# the environment as built (its llama-server links llama.cpp's libraries at this path)
COPY --from=build /opt/lmd /opt/lmd
ENV PATH=/opt/lmd/bin:$PATH
USER 10001:10001
WORKDIR /home/lmd
VOLUME ["/data"]
EXPOSE 8420
# /healthz needs no token; python's stdlib does the request, so the image needs no curl.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; port = os.environ.get('LMD_BIND', '8420').rsplit(':', 1)[-1]; urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4)"]
ENTRYPOINT ["lmd"]
CMD ["serve"]
