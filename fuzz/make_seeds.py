#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/seed-*), committed with them.

Run from the repository root after a build (the unique ids come from the Python module):
    PYTHONPATH=build/python python3 fuzz/make_seeds.py
Regression inputs (crash-*, named after what they found) live beside the seeds and are never regenerated."""
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def frame(kind, payload=b""):
    return struct.pack("<II", kind, len(payload)) + payload


def s(text):
    b = text.encode()
    return struct.pack("<I", len(b)) + b


def ranks(*rs):
    return struct.pack("<I", len(rs)) + b"".join(struct.pack("<I", r) for r in rs)


# Message types (src/bootstrap/wire.h).
HELLO, RELAY, REPORT, GOODBYE, WAIT_STATE, WAIT_QUERY = 2, 5, 6, 8, 10, 11

# root_wire: first byte odd = authenticated first, even = a stranger.
put("root_wire", "relay-to-self", b"\x01" + frame(RELAY, struct.pack("<QIIQ", 7, 0, 0, 9) + b"hello"))
put("root_wire", "relay-to-nobody", b"\x01" + frame(RELAY, struct.pack("<QIIQ", 7, 0, 5, 9) + b"x"))
put("root_wire", "report-failure", b"\x01" + frame(REPORT, s("rank 0 gave up")))
put("root_wire", "wait-state-then-query",
    b"\x01" + frame(WAIT_STATE, s("allreduce #3") + ranks(0)) + frame(WAIT_QUERY, struct.pack("<Q", 1) + ranks(0)))
put("root_wire", "wait-query-bad-rank", b"\x01" + frame(WAIT_QUERY, struct.pack("<Q", 2) + ranks(3, 4096)))
put("root_wire", "goodbye", b"\x01" + frame(GOODBYE))
put("root_wire", "short-frame", b"\x01" + struct.pack("<II", RELAY, 100) + b"abc")
put("root_wire", "huge-length", b"\x01" + struct.pack("<II", RELAY, 0xFFFFFFFF))
put("root_wire", "stranger-bad-mac",
    b"\x00" + frame(HELLO, struct.pack("<IIQI", 0, 1, 12345, 99) + s("evil") + s("10.0.0.1")))
put("root_wire", "stranger-garbage", b"\x00GET / HTTP/1.1\r\nHost: x\r\n\r\n")
put("root_wire", "stranger-relay-first", b"\x00" + frame(RELAY, struct.pack("<QIIQ", 7, 0, 0, 9)))

# unique_id: real ids (checksummed), and one cut short.
try:
    import strata
    for i in range(3):
        put("unique_id", "id%d" % i, strata.get_unique_id())
    put("unique_id", "truncated", strata.get_unique_id()[:40])
except ImportError as e:
    print("no strata module (%s): unique_id seeds not written" % e)

# config: first byte picks the variable (fuzz_config.cc's kVars order), the rest is its value.
for i, value in enumerate([b"600000", b"128K", b"8", b"2", b"5", b"4M", b"256K", b"0", b"tcp",
                           b"allreduce:ring,allgather:rhd", b"eth0", b"/nonexistent.json"]):
    put("config", "var%d" % i, bytes([i]) + value)
put("config", "overflow", bytes([0]) + b"99999999999999999999999")
put("config", "negative", bytes([1]) + b"-4k")
put("config", "hex", bytes([2]) + b"0x10")

# topology: the example cluster files.
for name in ("dgx_2x8gpu_4nic.json", "two_hosts_tcp.json"):
    shutil.copy(os.path.join(HERE, "..", "tests", "data", "topo", name),
                os.path.join(HERE, "corpus", "topology", "seed-" + name))
put("topology", "empty-object", b"{}")
put("topology", "deep", b"[" * 5000)
