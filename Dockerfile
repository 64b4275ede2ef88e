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
# a C compiler for the online-Elo bootstrap's loop (plugins/elo/_online.c); the final image
# gets only the built wheel
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE settings.sql ./
COPY daemon ./daemon
COPY plugins ./plugins
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LMD_HOME=/data \
    LMD_BIND=0.0.0.0:8420
# bubblewrap: the command sandbox. Not pinned: Debian's security updates replace the version.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --gid 10001 lmd \
    && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin lmd \
    && mkdir -p /data \
    && chown 10001:10001 /data
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index /wheels/*.whl \
    && rm -rf /wheels
USER 10001:10001
WORKDIR /home/lmd
VOLUME ["/data"]
EXPOSE 8420
# /healthz needs no token; python's stdlib does the request, so the image needs no curl.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; port = os.environ.get('LMD_BIND', '8420').rsplit(':', 1)[-1]; urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4)"]
ENTRYPOINT ["lmd"]
CMD ["serve"]
