#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets into fuzz/seeds/<target>/ (the input
layouts are in each target's doc comment, fuzz/fuzz_targets/<target>.rs):

- pgoutput: pgoutput messages encoded by hand following Postgres' "Logical Replication
  Message Formats" (protocol versions 1-4: streaming, two-phase), COPY data in text and
  binary format, single text and binary values of the built-in types;
- binlog: MariaDB / MySQL binlog events following their event formats (v4 header,
  QUERY with a CREATE TABLE, TABLE_MAP, WRITE/UPDATE/DELETE_ROWS v1 and v2, XID, ROTATE,
  MariaDB's GTID, GTID_LIST, BINLOG_CHECKPOINT and ANNOTATE_ROWS, MySQL's GTID);
- config: the repository's example configurations (docker/*.toml, README.md's TOML
  blocks), plus environment overrides;
- segment: real log directories written through cdc-log's API
  (`cargo run -p cdc-log --example fuzz_seeds`).

scripts/fuzz.sh merges these into fuzz/corpus/<target>/ (minimised) when the corpus is
missing; run `python3 fuzz/seeds.py` and then `scripts/fuzz.sh --merge-seeds` to refresh.
"""
import os
import re
import shutil
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "seeds")


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---------------------------------------------------------------------------------------
# pgoutput (all integers big-endian; String = NUL-terminated)

def s(v):
    return v.encode() + b"\0"


def i8(v):
    return struct.pack(">B", v)


def i16(v):
    return struct.pack(">h", v)


def i32(v):
    return struct.pack(">i", v)


def u32(v):
    return struct.pack(">I", v)


def i64(v):
    return struct.pack(">q", v)


def chunk(kind, body):
    return bytes([kind]) + struct.pack(">H", len(body)) + body


def msg(body):
    return chunk(0, body)


def tuple_data(cols):
    out = i16(len(cols))
    for c in cols:
        if c is None:
            out += b"n"
        elif c == "u":
            out += b"u"
        elif isinstance(c, bytes):
            out += b"b" + i32(len(c)) + c
        else:
            b = c.encode()
            out += b"t" + i32(len(b)) + b
    return out


def relation(rel_id, cols, xid=None, identity=b"d", ns="public", name="t"):
    out = b"R" + (u32(xid) if xid is not None else b"") + u32(rel_id) + s(ns) + s(name) + identity
    out += i16(len(cols))
    for key, cname, oid, typmod in cols:
        out += i8(1 if key else 0) + s(cname) + u32(oid) + i32(typmod)
    return out


# (name, type oid, typmod, a valid text value)
PG_COLS = [
    ("id", 23, -1, "42"),
    ("big", 20, -1, "-9223372036854775808"),
    ("small", 21, -1, "-32768"),
    ("flag", 16, -1, "t"),
    ("name", 1043, 24, "héllo wörld"),
    ("code", 1042, 9, "ab   "),
    ("body", 25, -1, "line\nwith\ttabs"),
    ("price", 1700, (10 << 16) + 2 + 4, "12345678.90"),
    ("ratio", 700, -1, "1.5e-10"),
    ("score", 701, -1, "-Infinity"),
    ("raw", 17, -1, "\\x00ff10"),
    ("born", 1082, -1, "0044-03-15 BC"),
    ("at", 1114, 3 + 0, "2024-01-31 12:00:00.123"),
    ("atz", 1184, -1, "2024-02-29 23:59:59.999999+00"),
    ("t", 1083, -1, "24:00:00"),
    ("ttz", 1266, -1, "12:34:56.5+05:30:15"),
    ("iv", 1186, -1, "P-1Y2M3DT-4H5M6.5S"),
    ("u", 2950, -1, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    ("j", 114, -1, '{"a": [1, 2.5, null]}'),
    ("jb", 3802, -1, '{"k": {"n": true}}'),
    ("bits", 1560, 8, "10101010"),
    ("vbits", 1562, 16, "101"),
    ("ints", 1007, -1, '{1,NULL,3}'),
    ("texts", 1009, -1, '[0:1]={"a \\"q\\"",b}'),
    ("nested", 1231, -1, '{{1.5,2},{NaN,-0.001}}'),
    ("net", 869, -1, "192.168.0.1/24"),
    ("money", 790, -1, "$1,000.00"),
    ("oid", 26, -1, "4294967295"),
    ("mood", 90000, -1, "ok"),
    ("price2", 90001, -1, "12.50"),
    ("pair", 90002, -1, '(1,"a b","{1,2}",sad)'),
    ("pairs", 90003, -1, '{"(1,x,{},ok)","(2,,,)"}'),
    ("moods", 90004, -1, "{sad,ok}"),
    ("loop", 90005, -1, "x"),
    ("ext", 16999, -1, "anything"),
]


def pg_seeds():
    rel = relation(16384, [(i == 0, n, o, m) for i, (n, o, m, _) in enumerate(PG_COLS)])
    vals = [v for (_, _, _, v) in PG_COLS]
    old = [vals[0]] + [None] * (len(vals) - 1)
    begin = b"B" + i64(0x16B3748) + i64(757_000_000_000_000) + u32(7)
    commit = b"C" + i8(0) + i64(0x16B3748) + i64(0x16B3780) + i64(757_000_000_000_000)
    n = 0

    def put(data):
        nonlocal n
        write("pgoutput", f"seed-{n:03}", data)
        n += 1

    # A transaction of every change kind, every column type.
    put(b"".join(msg(m) for m in [
        begin, rel,
        b"I" + u32(16384) + b"N" + tuple_data(vals),
        b"U" + u32(16384) + b"K" + tuple_data(old) + b"N" + tuple_data(["43"] + vals[1:]),
        b"U" + u32(16384) + b"N" + tuple_data(vals[:5] + ["u"] * (len(vals) - 5)),
        b"D" + u32(16384) + b"K" + tuple_data(old),
        commit]))
    # REPLICA IDENTITY FULL, old tuples 'O', an origin, a type, a truncate, a message.
    small = [(True, "id", 23, -1), (False, "v", 25, -1), (False, "m", 90000, -1)]
    put(b"".join(msg(m) for m in [
        begin,
        b"O" + i64(0x16B3700) + s("node1"),
        b"Y" + u32(90000) + s("public") + s("mood"),
        relation(16385, small, identity=b"f"),
        b"I" + u32(16385) + b"N" + tuple_data(["1", "a", "sad"]),
        b"U" + u32(16385) + b"O" + tuple_data(["1", "a", "sad"]) + b"N" + tuple_data(["1", None, "ok"]),
        b"D" + u32(16385) + b"O" + tuple_data(["1", None, "ok"]),
        b"T" + i32(2) + i8(3) + u32(16384) + u32(16385),
        b"M" + i8(1) + i64(0x16B3710) + s("cdc.test") + i32(5) + b"hello",
        b"M" + i8(0) + i64(0x16B3720) + s("") + i32(0),
        commit]))
    # Streaming (protocol 2+): xids inside Stream Start..Stop, commit and aborts.
    put(b"".join(msg(m) for m in [
        b"S" + u32(900) + i8(1),
        relation(16386, small, xid=900),
        b"Y" + u32(900) + u32(90000) + s("public") + s("mood"),
        b"I" + u32(901) + u32(16386) + b"N" + tuple_data(["1", "x", "ok"]),
        b"U" + u32(900) + u32(16386) + b"N" + tuple_data(["1", "y", "ok"]),
        b"D" + u32(900) + u32(16386) + b"K" + tuple_data(["1", None, None]),
        b"T" + u32(900) + i32(1) + i8(0) + u32(16386),
        b"M" + u32(900) + i8(1) + i64(5) + s("p") + i32(1) + b"x",
        b"E",
        b"S" + u32(900) + i8(0),
        b"E",
        b"A" + u32(900) + u32(901),
        b"A" + u32(900) + u32(900) + i64(0x16B4000) + i64(757_000_000_000_001),
        b"c" + u32(900) + i8(0) + i64(0x16B3748) + i64(0x16B3780) + i64(757_000_000_000_000)]))
    # Two-phase commit (protocol 3+).
    put(b"".join(msg(m) for m in [
        b"b" + i64(0x100) + i64(0x200) + i64(1) + u32(77) + s("gid-1"),
        relation(16387, small),
        b"I" + u32(16387) + b"N" + tuple_data(["2", "z", "sad"]),
        b"P" + i8(0) + i64(0x100) + i64(0x200) + i64(2) + u32(77) + s("gid-1"),
        b"K" + i8(0) + i64(0x300) + i64(0x400) + i64(3) + u32(77) + s("gid-1"),
        b"r" + i8(0) + i64(0x200) + i64(0x500) + i64(2) + i64(4) + u32(78) + s("gid-2"),
        b"S" + u32(79) + i8(1),
        b"E",
        b"p" + i8(0) + i64(0x600) + i64(0x700) + i64(5) + u32(79) + s("gid-3")]))
    # The same message decoded with the other streaming state (chunk kind 1).
    put(chunk(1, b"I" + u32(5) + u32(16384) + b"N" + tuple_data(["1"])))
    # COPY text and binary of a relation whose columns all have binary decoders.
    bin_cols = [(True, "id", 23, -1), (False, "name", 25, -1), (False, "price", 1700, -1),
                (False, "at", 1184, -1), (False, "ok", 16, -1), (False, "raw", 17, -1),
                (False, "u", 2950, -1), (False, "d", 1082, -1), (False, "iv", 1186, -1),
                (False, "jb", 3802, -1), (False, "f", 701, -1), (False, "bits", 1562, -1)]
    rel_b = msg(relation(16388, bin_cols))
    text_row = "\t".join(["7", "a\\tb\\\\c\\n", "-12.340", "2024-01-31 12:00:00+00", "f",
                          "\\\\x0a0b", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "2024-02-29",
                          "PT1H", '{"a":1}', "1e308", "101"]).encode()
    put(rel_b + chunk(2, text_row + b"\n" + b"\t".join([b"\\N"] * 12) + b"\n") + chunk(2, text_row[:10]))

    def numeric(ndigits, weight, sign, dscale, digits):
        return struct.pack(">HhHH", ndigits, weight, sign, dscale) + b"".join(struct.pack(">H", d) for d in digits)

    fields = [
        i32(7),
        b"name",
        numeric(2, 0, 0x4000, 3, [12, 3400]),
        i64(759_000_000_000_000),
        b"\x01",
        b"\x0a\x0b",
        bytes.fromhex("a0eebc999c0b4ef8bb6d6bb9bd380a11"),
        i32(8826),
        i64(3_600_000_000) + i32(1) + i32(2),
        b"\x01" + b'{"a": 1}',
        struct.pack(">d", 1.5),
        i32(3) + b"\xa0",
    ]
    row = i16(len(fields)) + b"".join(i32(len(f)) + f for f in fields)
    null_row = i16(len(fields)) + i32(-1) * len(fields)
    header = b"PGCOPY\n\xff\r\n\0" + i32(0) + i32(0)
    put(rel_b + chunk(3, header + row) + chunk(3, null_row + i16(-1)))
    put(rel_b + chunk(3, header + row[:20]) + chunk(3, row[20:] + i16(-1)))
    # Single values: text (kind 4: type index, typmod + 1, text) and binary (kind 5).
    order = [16, 17, 18, 19, 20, 21, 23, 25, 26, 28, 114, 142, 650, 700, 701, 774, 790, 829, 869,
             1042, 1043, 1082, 1083, 1114, 1184, 1186, 1266, 1560, 1562, 1700, 2950, 3614, 3802]
    texts = {16: "true", 17: "a\\\\b\\001", 20: "9223372036854775807", 1700: "-0.000001",
             1082: "infinity", 1114: "294276-12-31 23:59:59.999999", 1184: "-infinity",
             1186: "P1Y2M3DT4H5M6.123456S", 1266: "00:00:00-15:59", 1562: "0101",
             2950: "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", 700: "NaN", 701: "1e-320"}
    vals_by_oid = {o: v for (_, o, _, v) in PG_COLS}
    values = b""
    for idx, oid in enumerate(order):
        t = texts.get(oid) or vals_by_oid.get(oid) or "x"
        values += chunk(4, bytes([idx, 0]) + t.encode())
    values += chunk(4, bytes([0x80 | 6, 0]) + b"{1,2,{3}}")
    values += chunk(4, bytes([0x80 | 29, 0]) + b'{"1.5",NULL}')
    put(values)
    bins = [b"\x01", i16(-2), i32(-3), i64(-4), struct.pack(">f", 1.5), struct.pack(">d", -0.0),
            numeric(3, 5, 0, 2, [1, 9999, 10]), "ünï".encode(), b"\x00\xff", i32(-730119),
            i64(86_400_000_000), i64(3_600_000_000) + i32(-19800), i64(-1), i64(2**62),
            i64(1) + i32(2) + i32(3), bytes(16), b'"x"', b"\x01[]", i32(12) + b"\xab\xc0"]
    put(b"".join(chunk(5, bytes([k]) + b) for k, b in enumerate(bins)))
    put(chunk(5, bytes([6]) + numeric(1, 32767, 0, 16383, [9999])))
    put(chunk(5, bytes([6]) + numeric(0, 0, 0xC000, 0, [])))


# ---------------------------------------------------------------------------------------
# binlog (little-endian; v4 event header of 19 bytes)

def le(fmt, *v):
    return struct.pack("<" + fmt, *v)


def lenenc(n):
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + le("H", n)
    return b"\xfd" + le("I", n)[:3]


def event(ty, body, server_id=1, flags=0, ts=1_700_000_000, log_pos=0):
    size = 19 + len(body)
    return le("IBIIIH", ts, ty, server_id, size, log_pos, flags) + body


def query(sql, db="shop", flags=0):
    status = b""
    post = le("IIBHH", 5, 0, len(db), 0, len(status))
    return event(2, post + status + db.encode() + b"\0" + sql.encode(), flags=flags)


def table_map(table_id, db, table, types, meta, nullable, names=None, flags=0):
    body = le("Q", table_id)[:6] + le("H", 1)
    body += bytes([len(db)]) + db.encode() + b"\0" + bytes([len(table)]) + table.encode() + b"\0"
    body += lenenc(len(types)) + bytes(types) + lenenc(len(meta)) + meta
    bitmap = bytearray((len(types) + 7) // 8)
    for i, n in enumerate(nullable):
        if n:
            bitmap[i // 8] |= 1 << (i % 8)
    body += bytes(bitmap)
    if names:
        # Optional metadata: COLUMN_NAME (4), each name a length-encoded string.
        v = b"".join(lenenc(len(n)) + n.encode() for n in names)
        body += bytes([4]) + lenenc(len(v)) + v
    return event(19, body, flags=flags)


def bitmap(bits):
    out = bytearray((len(bits) + 7) // 8)
    for i, b in enumerate(bits):
        if b:
            out[i // 8] |= 1 << (i % 8)
    return bytes(out)


def image(values):
    """values: encoded bytes per column, None for NULL (every column present)."""
    return bitmap([v is None for v in values]) + b"".join(v for v in values if v is not None)


def rows(ty, table_id, ncols, images, v2=True, flags=0):
    post = le("Q", table_id)[:6] + le("H", 1) + (le("H", 2) if v2 else b"")
    body = lenenc(ncols) + bitmap([True] * ncols)
    if ty in (24, 31):
        body += bitmap([True] * ncols)
    body += b"".join(images)
    return event(ty, post + body, flags=flags)


def datetime2(y, mo, d, h, mi, sec, frac_bytes):
    ymd = ((y * 13 + mo) << 5) | d
    hms = (h << 12) | (mi << 6) | sec
    v = ((ymd << 17) | hms) + 0x8000000000
    return v.to_bytes(5, "big") + frac_bytes


MARIA_CREATE = ("CREATE TABLE `t` (`id` int(11) NOT NULL, `name` varchar(20) CHARACTER SET utf8mb4 DEFAULT NULL, "
                "`price` decimal(10,2) DEFAULT NULL, `created` datetime(6) DEFAULT NULL, `ts` timestamp(3) NULL DEFAULT NULL, "
                "`dur` time(2) DEFAULT NULL, `d` date DEFAULT NULL, `y` year(4) DEFAULT NULL, `body` text DEFAULT NULL, "
                "`doc` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL CHECK (json_valid(`doc`)), "
                "`e` enum('a','b') DEFAULT NULL, `s` set('x','y') DEFAULT NULL, `b` bit(3) DEFAULT NULL, "
                "`f` float DEFAULT NULL, `g` double DEFAULT NULL, `big` bigint(20) unsigned DEFAULT NULL, "
                "`bin` binary(4) DEFAULT NULL, `l1` varchar(10) CHARACTER SET latin1 DEFAULT NULL, "
                "`ip` inet6 DEFAULT NULL, `uid` uuid DEFAULT NULL, PRIMARY KEY (`id`)) "
                "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")
# (type, metadata) per column of MARIA_CREATE
MARIA_TYPES = [(3, b""), (15, le("H", 80)), (246, bytes([10, 2])), (18, b"\x06"), (17, b"\x03"),
               (19, b"\x02"), (10, b""), (13, b""), (252, b"\x02"), (252, b"\x04"),
               (254, bytes([247, 1])), (254, bytes([248, 1])), (16, bytes([3, 0])), (4, b"\x04"),
               (5, b"\x08"), (8, b""), (254, bytes([254, 4])), (15, le("H", 10)),
               (254, bytes([254, 16])), (254, bytes([254, 16]))]
MARIA_NAMES = ["id", "name", "price", "created", "ts", "dur", "d", "y", "body", "doc", "e", "s", "b",
               "f", "g", "big", "bin", "l1", "ip", "uid"]


def maria_row(i, text="héllo"):
    name = text.encode()
    return [
        le("i", i),
        bytes([len(name)]) + name,
        bytes([0x80, 0, 0, 0x7B, 0x2D]),  # 123.45
        datetime2(2024, 2, 29, 23, 59, 59, (999999).to_bytes(3, "big")),
        (1_700_000_000).to_bytes(4, "big") + (1230).to_bytes(2, "big"),
        ((12 << 12 | 34 << 6 | 56) + 0x800000).to_bytes(3, "big") + bytes([50]),
        le("I", 15 | 3 << 5 | 2024 << 9)[:3],
        bytes([124]),
        le("H", 5) + b"a\nb\tc",
        le("I", 10) + b"{\"a\": [1]}",
        b"\x02",
        b"\x03",
        b"\x05",
        le("f", 1.5),
        le("d", -2.25),
        le("Q", 2**64 - 1),
        b"\x03ab\x01",
        b"\x03\xe9t\xe9",
        b"\x10" + bytes.fromhex("20010db8000000000000000000000001"),
        b"\x10" + bytes.fromhex("a0eebc999c0b4ef8bb6d6bb9bd380a11"),
    ]


def binlog_seeds():
    n = 0

    def put(data):
        nonlocal n
        write("binlog", f"seed-{n:03}", data)
        n += 1

    types = bytes(t for t, _ in MARIA_TYPES)
    meta = b"".join(m for _, m in MARIA_TYPES)
    ncols = len(MARIA_TYPES)
    tm = table_map(42, "shop", "t", types, meta, [i > 0 for i in range(ncols)], MARIA_NAMES)
    gtid = event(162, le("QIB", 100, 0, 0) + bytes(6), server_id=7)
    gtid_commit = event(162, le("QIB", 101, 1, 2) + le("Q", 55) + bytes(3), server_id=7)
    xid = event(16, le("Q", 99))
    begin = query("BEGIN")
    r1 = maria_row(1)
    r2 = maria_row(2, "wörld")
    nulls = [r1[0]] + [None] * (ncols - 1)
    # A whole MariaDB transaction: GTID, DDL, BEGIN, annotate, map, rows of each kind, XID.
    put(b"".join([
        event(4, le("Q", 4) + b"mariadb-bin.000001"),  # ROTATE
        event(163, le("I", 1) + le("IIQ", 0, 10124, 3584)),  # GTID_LIST
        event(161, le("I", 18) + b"mariadb-bin.000001"),  # BINLOG_CHECKPOINT
        event(162, le("QIB", 99, 0, 1 | 32) + bytes(6), server_id=7),  # standalone DDL
        query(MARIA_CREATE),
        gtid, begin,
        event(160, b"INSERT INTO t VALUES (1, ...)"),
        tm,
        rows(30, 42, ncols, [image(r1), image(nulls)]),
        rows(31, 42, ncols, [image(r1) + image(r2)]),
        rows(32, 42, ncols, [image(r2)]),
        xid,
        gtid_commit, begin, tm,
        rows(23, 42, ncols, [image(r1)], v2=False),
        rows(24, 42, ncols, [image(r1) + image(r2)], v2=False),
        rows(25, 42, ncols, [image(r2)], v2=False),
        query("COMMIT"),
    ]))
    # DDL that the follower must track, then rows of the altered table.
    put(b"".join([
        query("CREATE TABLE u (id bigint unsigned primary key, v varchar(300) charset latin1, "
              "z datetime, tt time, yy year)"),
        query("ALTER TABLE u ADD COLUMN IF NOT EXISTS w json AFTER id, MODIFY v text, DROP COLUMN yy"),
        query("RENAME TABLE u TO u2"),
        query("/*!40101 SET NAMES utf8mb4 */"),
        query("TRUNCATE TABLE u2"),
        table_map(43, "shop", "u2", bytes([8, 252, 252, 18, 19]), b"\x04\x02\x00\x00",
                  [False, True, True, True, True]),
        rows(30, 43, 5, [image([le("Q", 7), le("I", 2) + b"{}", le("H", 1) + b"\xff",
                                datetime2(0, 0, 0, 0, 0, 0, b""),
                                ((838 << 12 | 59 << 6 | 59) + 0x800000).to_bytes(3, "big")])]),
        query("DROP TABLE IF EXISTS u2, t /* generated */"),
        query("CREATE DATABASE IF NOT EXISTS other CHARACTER SET latin1"),
        query("XA PREPARE X'1234',X'',1"),
    ]))
    # MySQL 8 (header flag 2 selects its DDL spelling): JSON as binary JSON, MySQL's GTID.
    mysql_create = ("CREATE TABLE j (id int NOT NULL AUTO_INCREMENT, doc json, d decimal(65,30), "
                    "t2 time(6), PRIMARY KEY (id))")
    jsonb_obj = bytes([0x00, 1, 0, 12, 0, 11, 0, 1, 0, 0x05, 1, 0]) + b"a"
    jsonb_arr = bytes([0x02, 2, 0, 14, 0, 0x04, 1, 0, 0x0c, 10, 0]) + bytes([3]) + b"abc"
    mysql_gtid = event(33, bytes([1]) + bytes.fromhex("3e11fa4771ca11e19e33c80aa9429562") + le("q", 5)
                       + bytes([2]) + le("q", 0) + le("q", 1), flags=2)
    dec65 = bytes([0x80]) + bytes(28) + bytes([0, 0, 0, 1])
    put(b"".join([
        query(mysql_create, db="app", flags=2),
        mysql_gtid, query("BEGIN", flags=2),
        table_map(50, "app", "j", bytes([3, 245, 246, 19]), bytes([4, 65, 30, 6]),
                  [False, True, True, True], ["id", "doc", "d", "t2"], flags=2),
        rows(30, 50, 4, [image([le("i", 1), le("I", len(jsonb_obj)) + jsonb_obj, dec65[:30],
                                ((1 << 12) + 0x800000).to_bytes(3, "big") + (5).to_bytes(3, "big")]),
                         image([le("i", 2), le("I", len(jsonb_arr)) + jsonb_arr, None, None])],
             flags=2),
        event(16, le("Q", 100), flags=2),
    ]))
    # Each MariaDB event alone (and short / flagged variants).
    for body, ty in [(le("QIB", 5, 0, 2) + le("Q", 99), 162), (le("QIB", 5, 0, 64) + bytes(20), 162),
                     (le("QIB", 5, 0, 2)[:10], 162), (le("I", 0x10000002) + bytes(32), 163),
                     (le("I", 13) + b"binlog.000002", 161), (le("I", 0xffffffff) + b"x", 161),
                     ("UPDATE t SET a = 'ü'".encode(), 160), (b"\xff\xfe", 160)]:
        put(event(ty, body))


# ---------------------------------------------------------------------------------------
# config

def config_seeds():
    n = 0

    def put(data):
        nonlocal n
        write("config", f"seed-{n:03}", data)
        n += 1

    docker = os.path.join(ROOT, "docker")
    for f in sorted(os.listdir(docker)):
        if f.endswith(".toml"):
            with open(os.path.join(docker, f), "rb") as fh:
                put(fh.read())
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        readme = fh.read()
    blocks = re.findall(r"```toml\n(.*?)```", readme, re.S)
    for b in blocks:
        put(b.encode())
    # Whole configurations: a README block completed with what it needs, and environment
    # overrides after a NUL byte.
    base = b'name = "inventory"\n[source]\ntype = "postgres"\nurl = "postgres://cdc:secret@127.0.0.1:5432/app?sslmode=prefer"\ntables = ["public.orders"]\n'
    for b in blocks:
        if b"[source]" not in b.encode() and not b.startswith("name"):
            put(base + b.encode())
    put(base + b"\0SOURCE__PASSWORD=x\nLOG__PARTITIONS=12\nNAME=other\nROUTING=[{pattern = \"*\", topic = \"all\"}]\nLOG__DIR=123\n")
    put(b'name = "m"\n[source]\ntype = "mysql"\nurl = "mysql://root:pw@127.0.0.1:3306/shop"\ntables = ["shop.*"]\nzero_dates = "raw"\n'
        b'[log]\ntype = "kafka"\nbrokers = ["127.0.0.1:9092"]\n[log.kafka]\n"compression.type" = "zstd"\n'
        b'[[sink]]\nname = "cache"\ntype = "redis"\nurl = "redis://127.0.0.1:6379/0"\ntables = ["shop.orders"]\n')


def segment_seeds():
    out = os.path.join(OUT, "segment")
    os.makedirs(out, exist_ok=True)
    subprocess.run(["cargo", "run", "--quiet", "-p", "cdc-log", "--example", "fuzz_seeds", "--", out],
                   cwd=ROOT, check=True)


if __name__ == "__main__":
    which = sys.argv[1:] or ["pgoutput", "binlog", "config", "segment"]
    for t in which:
        shutil.rmtree(os.path.join(OUT, t), ignore_errors=True)
        {"pgoutput": pg_seeds, "binlog": binlog_seeds, "config": config_seeds,
         "segment": segment_seeds}[t]()
        print(f"{t}: {len(os.listdir(os.path.join(OUT, t)))} seeds in fuzz/seeds/{t}")
