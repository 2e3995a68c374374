#!/usr/bin/env python3
"""Writes MSCCL XML algorithm files (the format msccl-tools' MSCCLang emits) for the loaded-plan tests.

usage: gen_msccl.py DIR N  -> DIR/ring_allreduce.xml   (2 channels, 2 chunks per segment, out of place)
                              DIR/allpairs_allreduce.xml (scratch, a reducing tb waiting behind nops, in place)
                              DIR/ring_allgather.xml   (2 channels, in place)
                              DIR/allpairs_allgather.xml (a tb per peer, out of place)
"""
import os
import sys


def step(s, type_, srcbuf="i", srcoff=-1, dstbuf="o", dstoff=-1, cnt=1, depid=-1, deps=-1, hasdep=0):
    return (f'      <step s="{s}" type="{type_}" srcbuf="{srcbuf}" srcoff="{srcoff}" dstbuf="{dstbuf}" '
            f'dstoff="{dstoff}" cnt="{cnt}" depid="{depid}" deps="{deps}" hasdep="{hasdep}"/>')


def algo(name, coll, nchunks, nchannels, ngpus, inplace, gpus):
    out = [f'<algo name="{name}" proto="Simple" nchannels="{nchannels}" nchunksperloop="{nchunks}" ngpus="{ngpus}" '
           f'coll="{coll}" inplace="{1 if inplace else 0}">']
    for g, (ichunks, ochunks, schunks, tbs) in enumerate(gpus):
        out.append(f'  <gpu id="{g}" i_chunks="{ichunks}" o_chunks="{ochunks}" s_chunks="{schunks}">')
        for t, (send, recv, chan, steps) in enumerate(tbs):
            out.append(f'    <tb id="{t}" send="{send}" recv="{recv}" chan="{chan}">')
            out += [step(i, **st) for i, st in enumerate(steps)]
            out.append('    </tb>')
        out.append('  </gpu>')
    out.append('</algo>')
    return "\n".join(out) + "\n"


def ring_allreduce(n, channels=2, m=2):
    gpus = []
    for r in range(n):
        tbs = []
        for c in range(channels):
            seg = lambda j: c * n * m + (j % n) * m
            st = [dict(type_="s", srcoff=seg(r), cnt=m)]
            st += [dict(type_="rrs", srcoff=seg(r - t), cnt=m) for t in range(1, n - 1)]
            st.append(dict(type_="rrcs", srcoff=seg(r + 1), dstoff=seg(r + 1), cnt=m))
            st += [dict(type_="rcs", dstoff=seg(r - u), cnt=m) for u in range(0, n - 2)]
            st.append(dict(type_="r", dstoff=seg(r + 2), cnt=m))
            tbs.append(((r + 1) % n, (r - 1) % n, c, st))
        gpus.append((n * channels * m, n * channels * m, 0, tbs))
    return algo(f"msccl_ring_{n}", "allreduce", n * channels * m, channels, n, False, gpus)


def allpairs_allreduce(n):
    # In place: rank r owns chunk r; peers' contributions land in scratch; the reducing tb waits behind one nop per
    # receive, then reduces into chunk r, which every peer tb then sends out.
    gpus = []
    for r in range(n):
        peers = [p for p in range(n) if p != r]
        local = len(peers)
        tbs = []
        for k, p in enumerate(peers):
            tbs.append((p, p, 0, [dict(type_="s", srcoff=p, cnt=1),
                                  dict(type_="r", dstbuf="s", dstoff=k, hasdep=1),
                                  dict(type_="s", srcoff=r, depid=local, deps=2 * local - 1),
                                  dict(type_="r", dstbuf="i", dstoff=p)]))
        red = [dict(type_="nop", cnt=0, depid=k, deps=1) for k in range(local)]
        red += [dict(type_="re", srcbuf="s", srcoff=k, dstbuf="i", dstoff=r) for k in range(local)]
        red[-1]["hasdep"] = 1
        tbs.append((-1, -1, 0, red))
        gpus.append((n, n, local, tbs))
    return algo(f"msccl_allpairs_{n}", "allreduce", n, 1, n, True, gpus)


def ring_allgather(n, channels=2):
    gpus = []
    for r in range(n):
        tbs = []
        for c in range(channels):
            out = lambda frm: (frm % n) * channels + c
            st = [dict(type_="s", srcoff=c)]
            st += [dict(type_="rcs", dstoff=out(r - t)) for t in range(1, n - 1)]
            st.append(dict(type_="r", dstoff=out(r - (n - 1))))
            tbs.append(((r + 1) % n, (r - 1) % n, c, st))
        gpus.append((channels, n * channels, 0, tbs))
    return algo(f"msccl_ring_allgather_{n}", "allgather", n * channels, channels, n, True, gpus)


def allpairs_allgather(n):
    # Out of place: a tb per peer sends the input and receives the peer's; the last tb also copies its own.
    gpus = []
    for r in range(n):
        tbs = [(p, p, 0, [dict(type_="s", srcoff=0), dict(type_="r", dstoff=p)]) for p in range(n) if p != r]
        tbs[-1][3].append(dict(type_="cpy", srcoff=0, dstoff=r))
        gpus.append((1, n, 0, tbs))
    return algo(f"msccl_allpairs_allgather_{n}", "allgather", n, 1, n, False, gpus)


def main():
    d, n = sys.argv[1], int(sys.argv[2])
    os.makedirs(d, exist_ok=True)
    files = {"ring_allreduce.xml": ring_allreduce(n), "ring_allgather.xml": ring_allgather(n),
             "allpairs_allgather.xml": allpairs_allgather(n)}
    if n > 2:
        files["allpairs_allreduce.xml"] = allpairs_allreduce(n)
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
