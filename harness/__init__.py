"""Real Kafka brokers from Maven Central jars (as processes or in containers): the product's
broker provider (`group-replay broker`, `replay --against broker:VERSION`, the demo) and the
tests' broker fixtures. The real clients live in `demo.clients`.

A leaf package: it imports none of proxy, replay, validator or demo, so tests, benchmarks and the
live-broker side of replay can all stand on it; proxy never imports it (pyproject import contracts).

Public API (names other parts rely on; keep them stable):
- `harness.broker.BrokerSpec(kafka_version=DEFAULT, new_coordinator=None, extra_config={},
  heap_mb=384, secure_listeners=())`: what a broker is asked to be, the first argument of
  `plan_broker(spec, *, work_dir=None, progress=None, port=None) -> LaunchPlan`,
  `start_broker(spec, *, work_dir=None, ready_timeout_ms=90000, detach=False, progress=None,
  port=None) -> Broker` and `harness.cluster.start_cluster(spec, size=3, *, ...) -> Cluster`
  (`.bootstrap`, `.kafka_version`, `.new_coordinator`, `.pid`, `.log_path`, `.log_tail()`,
  `.stop()`, context manager); `find_running()` / `stop_detached()` for CLI-started brokers.
- `harness.lines`: `KAFKA_39`, `KAFKA_4X`, `line_for(version) -> KafkaLine` (mode, coordinators).
- `harness.admin.create_topic(bootstrap, topic, partitions=1)`.
- `harness.cli.KAFKA_GROUP_DEFAULTS`: Kafka's group settings for brokers started for a user.
- (moved) `demo.clients`: `ConsumerSpec`, `ClientKind`, `start_consumer(spec) -> ConsumerProcess`;
  `demo.group.run_group(bootstrap, topic, partitions, ...) -> GroupRun`, `render_table(run)`.
- `harness.container`: `engine.start_engine()`, `image.ensure_image(version)`,
  `kafka.ApacheKafkaContainer(image, version)`.
- pytest fixtures in tests/conftest.py: `broker_factory`, `kafka_39`, `kafka_4x`, `make_topic`,
  `container_engine`, `kafka_container`.
"""
