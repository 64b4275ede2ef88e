# Placeholder, completed by the clients work (non-root user, volume, healthcheck).
FROM python:3.11-slim
WORKDIR /app
COPY . /app
RUN pip install --no-cache-dir .
CMD ["lmd", "serve"]
