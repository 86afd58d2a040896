"""Real Kafka brokers (from Maven Central jars, as processes or in containers) and real clients.

A leaf package: it imports none of proxy, replay or validator, so tests, benchmarks and the
live-broker side of replay can all stand on it.

Public API (names other parts rely on; keep them stable):
- `harness.broker.start_broker(kafka_version, new_coordinator=None, extra_config=None, *,
  work_dir=None, heap_mb=384, ready_timeout_ms=90000, detach=False, progress=None) -> Broker`
  (`.bootstrap`, `.kafka_version`, `.new_coordinator`, `.pid`, `.log_path`, `.log_tail()`,
  `.stop()`, context manager); `find_running()` / `stop_detached()` for CLI-started brokers.
- `harness.lines`: `KAFKA_39`, `KAFKA_4X`, `line_for(version) -> KafkaLine` (mode, coordinators).
- `harness.admin.create_topic(bootstrap, topic, partitions=1)`.
- `harness.clients`: `ConsumerSpec`, `ClientKind`, `start_consumer(spec) -> ConsumerProcess`
  (`.wait_for()`, `.wait_assigned()`, `.assignments()`, `.stop()`, `.kill()`).
- `harness.demo.run_group(bootstrap, topic, partitions, ...) -> GroupRun`, `render_table(run)`.
- `harness.container`: `engine.start_engine()`, `image.ensure_image(version)`,
  `kafka.ApacheKafkaContainer(image, version)`.
- pytest fixtures in tests/conftest.py: `broker_factory`, `kafka_39`, `kafka_4x`, `make_topic`,
  `container_engine`, `kafka_container`.
"""
