"""Recording to pcapng and reading it back (design section 3).

`proxy.capture.writer` is the only module that imports scapy; the reader parses pcapng blocks
itself so that a capture cut short by a crash is read up to its last whole block. The writer's
background thread (design section 3) ships batches of frames to a writer process that builds and
writes the pcapng, so that packet synthesis never competes with the event loop for the GIL.
"""

from proxy.capture.header import CAPTURE_FORMAT, CAPTURE_FORMAT_VERSION

KAFKA_PORT = 9092  # the synthesized server port, so that Wireshark's Kafka dissector picks it up

__all__ = ["CAPTURE_FORMAT", "CAPTURE_FORMAT_VERSION", "KAFKA_PORT"]
