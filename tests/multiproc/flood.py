#!/usr/bin/env python3
"""A stranger flooding a Strata listener: opens COUNT TCP connections to HOST:PORT, at most HOLD of them open at
once (the oldest is closed to make room), one in GARBAGE_EVERY sending random bytes, the others silent. Connections
refused (nothing listening yet, or a full backlog) are retried until the deadline. Prints how many connections it
made and exits 0 once COUNT were made, 1 if the deadline passed first.

usage: flood.py HOST PORT [--count N] [--hold N] [--garbage-every N] [--deadline SEC] [--port-file FILE]
With --port-file, PORT is ignored and the ports are read from FILE (one per line, re-read while flooding), so a
caller can aim at listeners that open later (a transport's ephemeral ports).
"""
import argparse
import collections
import os
import socket
import sys
import time


def ports(args):
    if not args.port_file:
        return [args.port]
    try:
        with open(args.port_file) as f:
            return [int(p) for p in f.read().split() if p.strip()]
    except OSError:
        return []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--hold", type=int, default=900)
    ap.add_argument("--garbage-every", type=int, default=7)
    ap.add_argument("--deadline", type=float, default=240.0)
    ap.add_argument("--port-file")
    args = ap.parse_args()
    held = collections.deque()
    made = refused = 0
    end = time.monotonic() + args.deadline
    i = 0
    while made < args.count and time.monotonic() < end:
        targets = ports(args)
        if not targets:
            time.sleep(0.01)
            continue
        port = targets[i % len(targets)]
        i += 1
        if len(held) >= args.hold:
            held.popleft().close()
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        except OSError:  # out of descriptors ourselves (a lower ulimit than HOLD): make room
            if held:
                held.popleft().close()
            continue
        s.settimeout(2.0)
        try:
            s.connect((args.host, port))
        except OSError:
            s.close()
            refused += 1
            time.sleep(0.002)
            continue
        made += 1
        if made % args.garbage_every == 0:
            try:
                s.send(os.urandom(64))
            except OSError:
                pass
        held.append(s)
    for s in held:
        s.close()
    print("flood: %d connections made, %d refused or failed" % (made, refused))
    return 0 if made >= args.count else 1


if __name__ == "__main__":
    sys.exit(main())
