"""The sans-IO cores in a fresh interpreter: what is promised, precisely, and the proof.

design.md promises that the protocol cores (proxy.wire, proxy.session, replay.coordinator,
replay.member, replay.run, replay.assignors) take bytes and time in and give commands out, with
no sockets, no event loop, no threads, no clock. A fresh interpreter that imports them DOES load
asyncio, socket, selectors, threading and subprocess: kio's `kio.serial.writers` imports asyncio
(for its StreamWriter annotations) and kio's `kio.static` imports hypothesis, which imports the
rest. So the promise is not "these modules are never loaded" but:

1. no core module's own code imports them (the importer of every such module, watched by an
   import hook in the fresh interpreter, is a third-party or standard-library module, never a
   core file), and
2. no core uses them: a whole reference replay (coordinator, members, assignors, observer, wire
   codec, under two scenarios) and a proxy session relaying a JoinGroup both ways run with an
   audit hook and guards that fail on any socket, file open, subprocess, thread start, event
   loop, sleep or clock read. The guard proves itself on each of those at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CORES = (
    "proxy.wire",
    "proxy.session",
    "replay.coordinator",
    "replay.group_member",
    "replay.member",
    "replay.run",
    "replay.assignors",
)
WATCHED = ("asyncio", "socket", "selectors", "threading", "subprocess", "scapy", "rich", "pyspark")

SCRIPT = textwrap.dedent(
    """
    import json, sys, traceback
    from pathlib import Path

    ROOT = Path(sys.argv[1]).resolve()
    CORES = json.loads(sys.argv[2])
    WATCHED = set(json.loads(sys.argv[3]))
    CORE_PATHS = [str(ROOT / c.replace(".", "/")) for c in CORES]
    importers = {}

    class Watch:  # who imports each watched module (the frame below the import machinery)
        def find_spec(self, name, path, target=None):
            top = name.split(".")[0]
            if top in WATCHED and top not in importers:
                frames = [f.filename for f in traceback.extract_stack()[:-1] if "<frozen" not in f.filename]
                importers[top] = frames[-1] if frames else "?"
            return None

    sys.meta_path.insert(0, Watch())
    for core in CORES:
        __import__(core)
    importers = dict(importers)  # what importing the cores loaded (the shell's inputs come next)
    Watch.find_spec = lambda self, name, path, target=None: None

    # Inputs are made before the guard: reading a capture and a scenario file is the shell's IO.
    import tempfile
    from proxy.capture.reader import read_capture
    from proxy.commands import SendClient, SendUpstream
    from proxy.session import ProxySession
    from proxy.wire import encode_request, encode_response
    from replay.plan import build_plan
    from replay.run import replay_reference
    from replay.scenario import load_builtin
    from tests.support.synth import synthesize_capture

    capture = Path(tempfile.mkdtemp()) / "group.pcapng"
    synthesize_capture(capture, members=3, static=True, join_api_version=5, duration_ms=30_000)
    plan = build_plan(read_capture(capture), "sans-io")
    scenarios = [load_builtin("static-leader-bounce"), load_builtin("client-joingroup-v5-to-v9-upgrade")]

    from kio.schema.errors import ErrorCode
    from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
    from kio.schema.join_group.v5.response import JoinGroupResponse, JoinGroupResponseMember
    from kio.static.primitive import i32, i32Timedelta
    import datetime

    def ms(v):
        return i32Timedelta.parse(datetime.timedelta(milliseconds=v))

    join = encode_request(JoinGroupRequest(group_id="g", session_timeout=ms(45000),
        rebalance_timeout=ms(300000), member_id="", group_instance_id="a", protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b"\\x00"),)), 7, "c-1")
    answer = encode_response(JoinGroupResponse(throttle_time=ms(0), error_code=ErrorCode.none,
        generation_id=i32(1), protocol_name="range", leader="m-1", member_id="m-1",
        members=(JoinGroupResponseMember(member_id="m-1", group_instance_id="a", metadata=b"\\x00"),)), 7)

    def workload():
        events = 0
        for scenario in scenarios:
            events += len(replay_reference(plan, scenario).events)
        session = ProxySession(1, record=True)
        out = session.client_data(join, now_ns=1)
        back = session.upstream_data(answer, now_ns=2)
        relayed = [c for c in out if isinstance(c, SendUpstream)]
        relayed += [c for c in back if isinstance(c, SendClient)]
        return events, len(relayed)

    workload()  # once unguarded: lazy imports (kio schemas, which open files) happen here

    violations = []
    guard = {"on": False}

    class Violation(Exception):
        pass

    def refuse(what):
        if guard["on"]:
            violations.append(what)
            raise Violation(what)

    AUDITED = ("socket.", "open", "subprocess.", "os.system", "os.exec", "os.fork", "os.posix_spawn",
               "time.sleep")

    def audit(event, args):
        if guard["on"] and event.startswith(AUDITED):
            refuse(f"audit {event} {str(args)[:80]}")

    sys.addaudithook(audit)
    import _thread, asyncio, threading, time

    def guarded(owner, name):
        original = getattr(owner, name)
        def wrapper(*args, **kwargs):
            refuse(f"{getattr(owner, '__name__', owner)}.{name}")
            return original(*args, **kwargs)
        setattr(owner, name, wrapper)

    for name in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "sleep"):
        guarded(time, name)
    guarded(threading.Thread, "start")
    guarded(_thread, "start_new_thread")
    for name in ("new_event_loop", "get_event_loop", "run"):
        guarded(asyncio, name)

    guard["on"] = True
    try:
        events, relayed = workload()
        error = None
    except Exception as exc:
        events, relayed, error = 0, 0, repr(exc)
    guard["on"] = False
    seen = list(violations)

    # The guard proves itself: each kind of IO is caught.
    caught = []
    import socket
    for probe_name, probe in [("socket", lambda: socket.socket().close()), ("clock", time.monotonic),
                              ("thread", lambda: threading.Thread(target=lambda: None).start()),
                              ("loop", lambda: asyncio.new_event_loop().close()),
                              ("open", lambda: open(sys.executable, "rb").close())]:
        guard["on"] = True
        try:
            probe()
        except Violation:
            caught.append(probe_name)
        finally:
            guard["on"] = False
    print(json.dumps({"importers": importers, "violations": seen, "error": error,
                      "events": events, "relayed": relayed, "caught": caught, "core_paths": CORE_PATHS}))
    """
)


def test_the_cores_neither_import_nor_use_io_in_a_fresh_interpreter() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROOT), json.dumps(CORES), json.dumps(WATCHED)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["caught"] == ["socket", "clock", "thread", "loop", "open"], "the guard must catch each kind"
    assert result["error"] is None and result["violations"] == [], result
    assert result["events"] > 0 and result["relayed"] == 2, "the workload ran"
    for module, importer in result["importers"].items():
        assert not any(importer.startswith(core) for core in result["core_paths"]), (module, importer)
    # What is loaded, and by whom, is stated in the module docstring: kio brings asyncio itself.
    assert "asyncio" in result["importers"] and "/kio/" in result["importers"]["asyncio"]
    assert not {"scapy", "rich", "pyspark"} & set(result["importers"]), result["importers"]
