"""The container provider: the same Apache Kafka broker, built into a local image (no registry)
and started through testcontainers on podman's Docker-compatible API."""
