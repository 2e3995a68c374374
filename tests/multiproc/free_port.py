#!/usr/bin/env python3
"""Prints a free TCP port on 127.0.0.1 below the ephemeral range, so no socket another test opens meanwhile is
handed it (for a bootstrap root a test starts itself, MASTER_PORT)."""
import random
import socket

for _ in range(200):
    p = random.randint(20000, 32000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        print(p)
        break
    except OSError:
        pass
    finally:
        s.close()
