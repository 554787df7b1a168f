#!/usr/bin/env python3
"""Turns `redis-cli MONITOR` output into the RESP stream `redis-cli --pipe` sends.

Used by tests/bench/sink_drain.sh to replay, as the limit, exactly the commands a sink
sent: stdin is MONITOR's output (`<time> [<db> <client>] "CMD" "arg" ...`, arguments
quoted and escaped as Redis's sdscatrepr writes them), stdout the commands in RESP.
Commands named in --skip (the harness's own: INFO, FLUSHALL, ...) and the first line
(MONITOR's "OK") are left out.
"""
import argparse
import re
import sys

ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"a": b"\a", b"b": b"\b",
           b'"': b'"', b"\\": b"\\"}
# One quoted argument: a quote, then escapes or plain bytes, then a quote.
ARG = re.compile(rb'"((?:[^"\\]|\\x[0-9a-fA-F]{2}|\\.)*)"')
ESC = re.compile(rb'\\(x[0-9a-fA-F]{2}|.)')


def unescape(raw: bytes) -> bytes:
    if b"\\" not in raw:
        return raw

    def one(m):
        e = m.group(1)
        if len(e) == 3 and e[:1] == b"x":
            return bytes([int(e[1:], 16)])
        return ESCAPES.get(e, e)

    return ESC.sub(one, raw)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--skip", default="INFO,FLUSHALL,MONITOR,PING,DBSIZE,CONFIG,HELLO,CLIENT,COMMAND")
    args = p.parse_args()
    skip = {s.encode().upper() for s in args.skip.split(",") if s}
    out = sys.stdout.buffer
    n = 0
    for line in sys.stdin.buffer:
        bracket = line.find(b"] ")
        if bracket < 0:
            continue
        argv = [unescape(m.group(1)) for m in ARG.finditer(line, bracket + 2)]
        if not argv or argv[0].upper() in skip:
            continue
        out.write(b"*%d\r\n" % len(argv))
        for a in argv:
            out.write(b"$%d\r\n" % len(a))
            out.write(a)
            out.write(b"\r\n")
        n += 1
    print(f"{n} commands", file=sys.stderr)


if __name__ == "__main__":
    main()
