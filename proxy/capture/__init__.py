"""Recording to pcapng and reading it back (design section 3).

Only the capture writer process (`python -m proxy.capture.writer`: packets.py, tcp.py,
blocks.py) imports scapy, never the proxy; the reader parses pcapng blocks itself so that a
capture cut short by a crash is read up to its last whole block. The event loop hands batches of
frames to that process (design section 3's background writer) through a non-blocking pipe, so
that packet synthesis never competes with the event loop for the GIL.
"""

from proxy.capture.header import CAPTURE_FORMAT, CAPTURE_FORMAT_VERSION

KAFKA_PORT = 9092  # the synthesized server port, so that Wireshark's Kafka dissector picks it up

__all__ = ["CAPTURE_FORMAT", "CAPTURE_FORMAT_VERSION", "KAFKA_PORT"]
