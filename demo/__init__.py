"""`group-replay demo` and the real Kafka clients it drives.

A product package on top of the others: `demo.cli` runs the whole loop (record through the proxy,
replay, validate); `demo.group` is the demo's consumer group; `demo.clients` runs real consumers of
four kinds (librdkafka, kafka-python, aiokafka, Java) as subprocesses (`demo.consumer_main`,
`demo/java/GroupConsumer.java`), which the tests use as well. Nothing in proxy, replay, validator
or harness imports it (pyproject [tool.importlinter]).
"""
