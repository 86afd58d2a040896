"""Real Kafka brokers (from Maven Central jars, as processes or in containers) and real clients.

A leaf package: it imports none of proxy, replay or validator, so tests, benchmarks and the
live-broker side of replay can all stand on it.
"""
