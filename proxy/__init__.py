"""The transparent Kafka proxy: wire codec facade, relay sessions, rewriting and capture I/O.

This is the lowest layer of group-replay: `replay` and `validator` build on it, never the reverse.
"""
