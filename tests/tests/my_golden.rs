//! The Debezium golden test of the MySQL / MariaDB source: the rows of
//! `tests/golden/my_schema.sql` (initial snapshot) and the changes of
//! `tests/golden/my_changes.sql` (binlog stream) captured by our connector and by Debezium
//! 3.6.3's MySQL connector on MariaDB give the same JSON records — key and value, Connect
//! schema and payload, tombstones — field by field and in the same order per topic.
//!
//! Debezium's output is committed (`tests/golden/debezium_my_*.jsonl`, captured with
//! `tests/golden/capture_mysql.sh`, see the MySQL section of `tests/golden/README.md`);
//! neither Java nor Debezium is needed here. Two captures: Debezium's default value modes,
//! and `decimal.handling.mode=string`, `binary.handling.mode=hex`,
//! `time.precision.mode=connect`, `bigint.unsigned.handling.mode=precise`; both with
//! `snapshot.mode=initial`, `skipped.operations=none` (truncates) and
//! `provide.transaction.metadata=true` (the `transaction` block and the `golden.transaction`
//! topic; ours with `format.provide_transaction_metadata = true`), JSON with schemas. Both
//! connectors run at once on one fresh server (server id 1, as the capture's); the changes
//! are applied once both have written every snapshot record, as the capture did.
//!
//! What may differ, and nothing else:
//! - [`VOLATILE`]: values that must differ between two runs or two products (times,
//!   versions); both sides must carry the field;
//! - binlog offsets: the capture's server logged other events (the bench's user and
//!   database) before `my_schema.sql`, so its offsets are ours plus one constant, taken from
//!   the snapshot position; `source.pos` and the `pos` of a transaction id are compared after
//!   removing it;
//! - [`DEVIATIONS`]: values Debezium does not carry faithfully (a made-up year or date, a
//!   path-dependent spelling, null for a valid time) or carries differently where ours are
//!   as exact; [`SOURCE_BUGS`]: known differences of our source; [`MISSING`]: records
//!   Debezium writes and ours does not. Each is listed in schemas/FORMATS.md ("MySQL /
//!   MariaDB deviations from Debezium") and accepted by a rule that checks the difference is
//!   exactly that one; every rule must match at least once, so the lists cannot go stale;
//! - in the `golden.transaction` topic (BEGIN/END records): the ids, our MariaDB GTID where
//!   Debezium's MySQL connector writes `file=…,pos=…` ([`TX_IDS`]: ours are mapped through
//!   our change records' `source` and must then equal Debezium's, the offset shift removed),
//!   and the order of `data_collections` (a rule); [`golden_tx`] checks our ids and
//!   counts against our own change records;
//! - the schema-change topic `golden` (`debezium_my_schema_changes.jsonl`), which our
//!   connector does not produce.
//!
//! With default settings, the `cdc.unrepresentable.*` headers are checked too
//! ([`check_hidden_headers`]). A failure lists every differing field path with both values,
//! the first one (in capture, topic and record order) first. `MY_GOLDEN_DUMP=<dir>` writes
//! our records and the server's binlog there.

mod golden_tx;
mod my_source_util;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use cdc_harness::golden::{
    golden, hidden_headers, on_columns, read_topic, Comparison, Pair, Record, Rule,
};
use cdc_harness::{passwords, MariaDbOptions, MariaDbServer};
use my_source_util::Connector;
use mysql_async::prelude::Queryable;
use serde_json::{json, Value as Json};

const SCHEMA_SQL: &str = include_str!("../golden/my_schema.sql");
const CHANGES_SQL: &str = include_str!("../golden/my_changes.sql");
const GOLDEN_DEFAULT: &str = include_str!("../golden/debezium_my_default.jsonl");
const GOLDEN_MODES: &str = include_str!("../golden/debezium_my_modes.jsonl");

/// Debezium's `topic.prefix` in the captures (`DUMP_PREFIX`), our connector's `name`.
const PREFIX: &str = "golden";
/// Debezium's schema-change topic: not produced by ours.
const SKIPPED_TOPICS: &[&str] = &["golden"];
/// Debezium's transaction-metadata topic (`provide.transaction.metadata=true`), ours with
/// `format.provide_transaction_metadata = true`.
const TX_TOPIC: &str = "golden.transaction";
/// How our transaction records' ids are compared with Debezium's (applied before pairing;
/// counted as a rule).
const TX_IDS: &str = "transaction topic ids: we write the MariaDB GTID of the transaction, \
    as in the change records' transaction.id; Debezium's MySQL connector writes \
    file=<binlog file>,pos=<start of the transaction>: ours are replaced by the file and pos \
    of our change records of that GTID (their source), which must equal Debezium's";
/// The capture's `table.include.list` (the DDL targets listed up front).
const TABLES: &[&str] = &[
    "golden.types",
    "golden.no_pk",
    "golden.composite",
    "golden.zero_dates",
    "golden.ddl",
    "golden.ddl_renamed",
    "golden.created",
];

/// Paths in the value payload whose values must differ between runs or products:
/// processing times (`ts_*`), the event times of the binlog and snapshot (`source.ts_*`),
/// the product version (`3.6.3.Final` / `cdc-…`).
const VOLATILE: &[&str] = &[
    "ts_ms",
    "ts_us",
    "ts_ns",
    "source.version",
    "source.ts_ms",
    "source.ts_us",
    "source.ts_ns",
];

/// One capture: its golden file and our `[format]` section that corresponds to the
/// Debezium settings it was captured with (capture_mysql.sh; README.md's table).
struct Capture {
    name: &'static str,
    golden: &'static str,
    format: &'static str,
}

const CAPTURES: &[Capture] = &[
    Capture {
        name: "default",
        golden: GOLDEN_DEFAULT,
        format: "[format]\nvalue = \"json-schemas\"\nprovide_transaction_metadata = true\n",
    },
    Capture {
        name: "modes",
        golden: GOLDEN_MODES,
        // `ALTER TABLE ddl MODIFY a BIGINT UNSIGNED` turns int32 into a Decimal (bytes) in
        // precise mode: incompatible under the embedded registry's BACKWARD check, which
        // Debezium with the JSON converter does not make.
        format: "[format]\nvalue = \"json-schemas\"\nprovide_transaction_metadata = true\n\
                 schema_change = \"force\"\ndecimal_handling_mode = \"string\"\n\
                 binary_handling_mode = \"hex\"\ntime_precision_mode = \"connect\"\n\
                 bigint_unsigned_handling_mode = \"precise\"\n",
    },
];

/// Values Debezium does not carry faithfully, or carries differently where ours are as
/// exact; schemas/FORMATS.md ("MySQL / MariaDB deviations from Debezium") lists each.
/// Applied in order (the transaction-id rule reads our `source.pos` before the
/// [`SOURCE_BUGS`] rule replaces it).
const DEVIATIONS: &[Rule] = &[
    (
        "YEAR 0: Debezium writes 2000 (snapshot) or 1900 (binlog); we write 0, the stored year",
        year_zero,
    ),
    (
        "DATE/DATETIME years 0-99 (enable.time.adjuster): Debezium adds 2000 (years 1-69) \
         or 1900 (70-99) years, and makes year 0 2001 (snapshot) or the epoch (binlog); we \
         write the stored date",
        two_digit_years,
    ),
    (
        "ENUM member with a comma in the binlog path: Debezium escapes it (a\\,b) as in \
         `allowed`, its snapshot path does not; we write the member (a,b) in both",
        enum_comma_escaped,
    ),
    (
        "TIMESTAMP(n) in the snapshot: Debezium trims trailing zeros of the fraction, its \
         binlog path keeps n digits; we write n digits in both",
        zoned_fraction_trimmed,
    ),
    (
        "time.precision.mode=connect, TIME outside 00:00:00..24:00:00 (negative, >= 24 h): \
         Debezium writes null; we write the signed milliseconds",
        connect_time_out_of_day,
    ),
    (
        "JSON column of a table created after the snapshot: Debezium names it \
         io.debezium.data.Json (from the CREATE text), but not the same column type of a \
         table it snapshotted (SHOW CREATE TABLE: LONGTEXT); we write a plain string for both",
        json_name_from_ddl,
    ),
    (
        "column defaults other than integers and quoted strings (here TIMESTAMP NOT NULL \
         DEFAULT '0000-00-00 00:00:00', Debezium \"1970-01-01T00:00:00Z\"): Debezium copies \
         them into the field schema; we do not (FORMATS.md deviation 13)",
        column_default_missing,
    ),
    (
        "transaction.id: we write the MariaDB GTID of the transaction (as Debezium's MariaDB \
         connector); Debezium's MySQL connector, which reads no MariaDB GTIDs, writes \
         file=<binlog file>,pos=<start of the transaction>",
        transaction_id_gtid,
    ),
    (
        "source.gtid: we write the MariaDB GTID; Debezium's MySQL connector writes null",
        source_gtid,
    ),
    (
        "source.thread in the stream: Debezium writes 0 (from the BEGIN query event MariaDB \
         makes up for a replica that does not announce MariaDB capabilities); we write null \
         (MariaDB's row events name no thread)",
        source_thread,
    ),
    (
        "transaction topic, order of END's data_collections: Debezium's is a Java HashMap's \
         iteration order (here alphabetical); ours the order of each table's first change \
         (same counts)",
        golden_tx::data_collections_order,
    ),
];

/// Known differences of our MySQL source from Debezium, listed in schemas/FORMATS.md:
/// each rule must match, so the test fails once one is fixed and the rule is then removed.
const SOURCE_BUGS: &[Rule] = &[
    (
        "source.pos in the stream: ours is the transaction's start (its resume position, the \
         pos of Debezium's transaction id), Debezium's the position of the row's rows event",
        pos_is_transaction_start,
    ),
    (
        "source.pos of a truncate: ours is the start of its group (the GTID event right \
         before the statement), Debezium's the statement's own query event",
        truncate_pos_is_group_start,
    ),
];

/// A record kind Debezium writes and ours does not: a name (what and why) and a test.
type Missing = (&'static str, fn(&Record) -> bool);

/// Records Debezium writes that ours does not, removed from Debezium's list before the
/// records are paired (each must occur, as the rules above).
const MISSING: &[Missing] = &[(
    "no tombstone after a delete in a table without a primary key (null key): \
         FORMATS.md deviation 12",
    |r| r.key.is_none() && r.value.is_none(),
)];

/// Splits a SQL script into statements (`;` outside quotes and comments), dropping `--`
/// comments; each runs on its own connection in order, as the `mariadb` client runs a file.
fn statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quote) {
            ('\\', Some(_)) => {
                cur.push(c);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            ('\'' | '"', None) => {
                quote = Some(c);
                cur.push(c);
            }
            (q, Some(open)) if q == open => {
                quote = None;
                cur.push(c);
            }
            ('-', None) if chars.peek() == Some(&'-') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
                cur.push('\n');
            }
            (';', None) => {
                if !cur.trim().is_empty() {
                    out.push(cur.trim().to_string());
                }
                cur.clear();
            }
            _ => cur.push(c),
        }
    }
    assert!(cur.trim().is_empty(), "unterminated statement: {cur}");
    out
}

fn connector(my: &MariaDbServer, dir: &Path, cap: &Capture, server_id: u32) -> Connector {
    let url = format!(
        "{}?sslmode=disable",
        my.url("cdc", passwords::MARIADB_CDC, "golden")
    );
    let tables: Vec<String> = TABLES.iter().map(|t| format!("\"{t}\"")).collect();
    let text = format!(
        "name = \"{PREFIX}\"\n\n[source]\ntype = \"mysql\"\nurl = \"{url}\"\n\
         tables = [{}]\nserver_id = {server_id}\nheartbeat_interval_ms = 500\n\n\
         [snapshot]\nmode = \"initial\"\n\n[log]\ndir = \"{}\"\npartitions = 1\n\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\n{}",
        tables.join(", "),
        dir.join("log").display(),
        cap.format
    );
    let config = dir.join("cdc.toml");
    std::fs::write(&config, text).unwrap();
    Connector {
        dir: dir.to_path_buf(),
        config,
        child: None,
        topic: String::new(),
    }
}

fn read_all(c: &Connector, want: &BTreeMap<String, Vec<Record>>) -> BTreeMap<String, Vec<Record>> {
    want.keys()
        .map(|t| (t.clone(), read_topic(&c.log_dir(), t)))
        .collect()
}

/// Waits until `c`'s log holds, per topic, at least `n(want records)` records.
async fn wait_for(
    c: &mut Connector,
    want: &BTreeMap<String, Vec<Record>>,
    n: impl Fn(&[Record]) -> usize,
    what: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = read_all(c, want);
        if want.iter().all(|(t, w)| got[t].len() >= n(w)) {
            return;
        }
        c.assert_running();
        if Instant::now() > deadline {
            let counts: Vec<_> = want
                .iter()
                .map(|(t, w)| format!("{t}: {} of {}", got[t].len(), n(w)))
                .collect();
            panic!("{what}: {counts:?}\n{}", c.output());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The server's binlog file and the offset after its last event.
async fn binlog_end(my: &MariaDbServer) -> (String, u64) {
    let mut c = my.root_conn().await.unwrap();
    let row: mysql_async::Row = c
        .query_first("SHOW MASTER STATUS")
        .await
        .unwrap()
        .expect("binlog on");
    let _ = c.disconnect().await;
    (row.get(0).unwrap(), row.get(1).unwrap())
}

/// Waits until the connector's stream has read the binlog up to `file`/`pos`
/// (`/metrics` at `admin`).
async fn wait_read(c: &mut Connector, admin: &str, file: &str, pos: u64) {
    let number: f64 = file.rsplit('.').next().unwrap().parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        c.assert_running();
        let f = my_source_util::metric(admin, "cdc_mysql_binlog_file_number");
        let p = my_source_util::metric(admin, "cdc_mysql_binlog_position");
        if f.is_some_and(|f| f > number) || (f == Some(number) && p >= Some(pos as f64)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the stream did not reach {file}:{pos} (at {f:?}:{p:?})\n{}",
            c.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// With default settings, every BIGINT UNSIGNED value above 2^63-1 (which Debezium and we
/// wrap to a negative int64 in `long` mode) has its exact text in a
/// `cdc.unrepresentable.<image>.<column>` header, and no other record has one; with
/// `bigint_unsigned_handling_mode = "precise"` none has (schemas/FORMATS.md, "Values the
/// record format cannot carry").
fn check_hidden_headers(cap: &Capture, got: &BTreeMap<String, Vec<Record>>, cmp: &mut Comparison) {
    let max = "18446744073709551615";
    let half = "9223372036854775808";
    let mut want: Vec<(String, String, i64, String, String)> = Vec::new();
    if cap.name == "default" {
        let mut add = |table: &str, op: &str, id: i64, image: &str, column: &str, v: &str| {
            want.push((
                format!("{PREFIX}.golden.{table}"),
                op.to_string(),
                id,
                format!("cdc.unrepresentable.{image}.{column}"),
                v.to_string(),
            ))
        };
        add("types", "r", 3, "after", "c_bigint_u", max);
        add("types", "r", 4, "after", "c_bigint_u", half);
        add("types", "c", 13, "after", "c_bigint_u", max);
        add("types", "c", 14, "after", "c_bigint_u", half);
        // Row 4 is updated twice (c_year, c_tinyint): both images hold the value.
        for _ in 0..2 {
            add("types", "u", 4, "before", "c_bigint_u", half);
            add("types", "u", 4, "after", "c_bigint_u", half);
        }
        add("ddl", "c", 5, "after", "a", max);
    }
    let seen = hidden_headers(got);
    want.sort();
    if want != seen {
        cmp.fail(format!(
            "[{}] unrepresentable-value headers: want {want:#?}\nours {seen:#?}",
            cap.name
        ));
    }
}

/// With `MY_GOLDEN_DUMP=<dir>`: our records as `ours_<capture>.jsonl` (the golden files'
/// line format) and the server's binlog, to look at a difference.
fn dump(my: &MariaDbServer, cap: &Capture, got: &BTreeMap<String, Vec<Record>>) {
    let Some(dir) = std::env::var_os("MY_GOLDEN_DUMP") else {
        return;
    };
    let dir = Path::new(&dir);
    std::fs::create_dir_all(dir).unwrap();
    let mut text = String::new();
    for (topic, recs) in got {
        for r in recs {
            let line =
                json!({"destination": topic, "key": r.key, "value": r.value, "headers": r.headers});
            text.push_str(&format!("{line}\n"));
        }
    }
    std::fs::write(dir.join(format!("ours_{}.jsonl", cap.name)), text).unwrap();
    let _ = std::fs::copy(my.dir().join("binlog.000001"), dir.join("binlog.000001"));
}

fn is_snapshot(r: &Record) -> bool {
    r.value.as_ref().is_some_and(|v| v["payload"]["op"] == "r")
}

// ---- comparison --------------------------------------------------------------------

/// The binlog position of a record's `source.pos` and of its `transaction.id`
/// (`file=…,pos=N`).
fn positions(v: &Json) -> (Option<i64>, Option<i64>) {
    let p = &v["payload"];
    let pos = p["source"]["pos"].as_i64();
    let tx = p["transaction"]["id"]
        .as_str()
        .and_then(|s| s.rsplit_once(",pos="))
        .and_then(|(_, n)| n.parse().ok());
    (pos, tx)
}

/// Replaces the positions in `v` by `pos - shift` (so they compare with Debezium's).
fn unshift(v: &mut Json, shift: i64) {
    let (pos, tx) = positions(v);
    let p = &mut v["payload"];
    if let Some(pos) = pos {
        p["source"]["pos"] = json!(pos - shift);
    }
    if let (Some(tx), Some(id)) = (tx, p["transaction"]["id"].as_str()) {
        let (head, _) = id.rsplit_once(",pos=").unwrap();
        p["transaction"]["id"] = json!(format!("{head},pos={}", tx - shift));
    }
}

fn year_zero(p: &mut Pair) -> bool {
    on_columns(
        p,
        |op, _, _, cs, w, g| {
            let want = if op == "r" { 2000 } else { 1900 };
            cs.is_some_and(|s| s["name"] == "io.debezium.time.Year")
                && w == Some(&json!(want))
                && g == Some(&json!(0))
        },
        |_, _, _| false,
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Units per day of Debezium's date and timestamp schemas.
fn per_day(schema_name: &str) -> Option<i64> {
    Some(match schema_name {
        "io.debezium.time.Date" | "org.apache.kafka.connect.data.Date" => 1,
        "io.debezium.time.Timestamp" | "org.apache.kafka.connect.data.Timestamp" => 86_400_000,
        "io.debezium.time.MicroTimestamp" => 86_400_000_000,
        _ => return None,
    })
}

fn two_digit_years(p: &mut Pair) -> bool {
    on_columns(
        p,
        |op, _, _, cs, w, g| {
            let (Some(unit), Some(w), Some(g)) = (
                cs.and_then(|s| s["name"].as_str()).and_then(per_day),
                w.and_then(Json::as_i64),
                g.and_then(Json::as_i64),
            ) else {
                return false;
            };
            let (days, rem) = (g.div_euclid(unit), g.rem_euclid(unit));
            let (y, m, d) = civil_from_days(days);
            let shifted = |add: i64| days_from_civil(y + add, m, d) * unit + rem;
            match y {
                1..=69 => w == shifted(2000),
                70..=99 => w == shifted(1900),
                0 if op == "r" => w == days_from_civil(2001, m, d) * unit + rem,
                0 => w == 0,
                _ => false,
            }
        },
        |_, _, _| false,
    )
}

fn enum_comma_escaped(p: &mut Pair) -> bool {
    on_columns(
        p,
        |op, _, _, cs, w, g| {
            let (Some(w), Some(g)) = (w.and_then(Json::as_str), g.and_then(Json::as_str)) else {
                return false;
            };
            op != "r"
                && cs.is_some_and(|s| s["name"] == "io.debezium.data.Enum")
                && g.contains(',')
                && w == g.replace(',', "\\,")
        },
        |_, _, _| false,
    )
}

fn zoned_fraction_trimmed(p: &mut Pair) -> bool {
    on_columns(
        p,
        |op, _, _, cs, w, g| {
            let (Some(w), Some(g)) = (w.and_then(Json::as_str), g.and_then(Json::as_str)) else {
                return false;
            };
            let Some((secs, frac)) = g.strip_suffix('Z').and_then(|t| t.split_once('.')) else {
                return false;
            };
            let frac = frac.trim_end_matches('0');
            let trimmed = if frac.is_empty() {
                format!("{secs}Z")
            } else {
                format!("{secs}.{frac}Z")
            };
            op == "r"
                && cs.is_some_and(|s| s["name"] == "io.debezium.time.ZonedTimestamp")
                && w == trimmed
        },
        |_, _, _| false,
    )
}

fn connect_time_out_of_day(p: &mut Pair) -> bool {
    on_columns(
        p,
        |_, _, _, cs, w, g| {
            cs.is_some_and(|s| s["name"] == "org.apache.kafka.connect.data.Time")
                && w == Some(&Json::Null)
                && g.and_then(Json::as_i64)
                    .is_some_and(|ms| !(0..86_400_000).contains(&ms))
        },
        |_, _, _| false,
    )
}

fn json_name_from_ddl(p: &mut Pair) -> bool {
    on_columns(
        p,
        |_, _, _, _, _, _| false,
        |_, w, g| {
            let (Some(w), Some(g)) = (w, g) else {
                return false;
            };
            let mut named = g.clone();
            named["name"] = json!("io.debezium.data.Json");
            named["version"] = json!(1);
            w["name"] == "io.debezium.data.Json"
                && g.get("name").is_none()
                && g["type"] == "string"
                && {
                    let mut a = w.clone();
                    let mut b = named;
                    // Key order aside (the diff checks it separately).
                    a.as_object_mut().unwrap().sort_keys();
                    b.as_object_mut().unwrap().sort_keys();
                    a == b
                }
        },
    )
}

fn column_default_missing(p: &mut Pair) -> bool {
    on_columns(
        p,
        |_, _, _, _, _, _| false,
        |_, w, g| {
            let (Some(w), Some(g)) = (w, g) else {
                return false;
            };
            let mut w = w.clone();
            w.get("default").is_some()
                && g.get("default").is_none()
                && w.as_object_mut().unwrap().remove("default").is_some()
                && &w == g
        },
    )
}

/// Both sides' `payload.source` and `payload.transaction` (when the record has a value).
fn blocks<'a>(p: &'a mut Pair) -> Option<(&'a Json, &'a mut Json)> {
    let (Some(w), Some(g)) = (p.want.value.as_ref(), p.got.value.as_mut()) else {
        return None;
    };
    Some((&w["payload"], &mut g["payload"]))
}

fn is_gtid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn transaction_id_gtid(p: &mut Pair) -> bool {
    let Some((w, g)) = blocks(p) else {
        return false;
    };
    let (Some(wid), Some(gid)) = (
        w["transaction"]["id"].as_str(),
        g["transaction"]["id"].as_str(),
    ) else {
        return false;
    };
    let dbz = format!(
        "file={},pos={}",
        g["source"]["file"].as_str().unwrap_or_default(),
        g["source"]["pos"]
    );
    if is_gtid(gid) && g["source"]["gtid"] == gid && wid == dbz {
        g["transaction"]["id"] = json!(wid);
        return true;
    }
    false
}

fn source_gtid(p: &mut Pair) -> bool {
    let Some((w, g)) = blocks(p) else {
        return false;
    };
    if w["source"]["gtid"].is_null() && g["source"]["gtid"].as_str().is_some_and(is_gtid) {
        g["source"]["gtid"] = Json::Null;
        return true;
    }
    false
}

fn source_thread(p: &mut Pair) -> bool {
    let Some((w, g)) = blocks(p) else {
        return false;
    };
    if w["op"] != "r" && w["source"]["thread"] == 0 && g["source"]["thread"].is_null() {
        g["source"]["thread"] = json!(0);
        return true;
    }
    false
}

fn pos_is_transaction_start(p: &mut Pair) -> bool {
    let Some((w, g)) = blocks(p) else {
        return false;
    };
    let start = w["transaction"]["id"]
        .as_str()
        .and_then(|s| s.rsplit_once(",pos="))
        .and_then(|(_, n)| n.parse::<i64>().ok());
    let (Some(start), Some(wp), Some(gp)) = (
        start,
        w["source"]["pos"].as_i64(),
        g["source"]["pos"].as_i64(),
    ) else {
        return false;
    };
    if w["op"] != "r" && gp == start && wp > start {
        g["source"]["pos"] = json!(wp);
        return true;
    }
    false
}

fn truncate_pos_is_group_start(p: &mut Pair) -> bool {
    let Some((w, g)) = blocks(p) else {
        return false;
    };
    let (Some(wp), Some(gp)) = (w["source"]["pos"].as_i64(), g["source"]["pos"].as_i64()) else {
        return false;
    };
    // A GTID event is tens of bytes: the statement follows it at once.
    if w["op"] == "t" && g["op"] == "t" && gp < wp && wp - gp <= 64 {
        g["source"]["pos"] = json!(wp);
        return true;
    }
    false
}

/// The data collection our END records count a change record under: `db.table`.
fn data_collection(_topic: &str, payload: &Json) -> String {
    let s = &payload["source"];
    format!(
        "{}.{}",
        s["db"].as_str().unwrap_or_default(),
        s["table"].as_str().unwrap_or_default()
    )
}

/// Replaces the GTID id of each of our transaction records by `file=<file>,pos=<pos>` of
/// our change records with that GTID (`source.file`, `source.pos` minus `shift`: the start
/// of the transaction, see [`SOURCE_BUGS`]), the form Debezium's MySQL connector writes.
/// Returns how many it replaced.
fn map_tx_ids(got: &mut BTreeMap<String, Vec<Record>>, shift: i64) -> usize {
    let mut by_gtid: BTreeMap<String, String> = BTreeMap::new();
    for r in got
        .iter()
        .filter(|(t, _)| *t != TX_TOPIC)
        .flat_map(|(_, r)| r)
    {
        let Some(p) = r.value.as_ref().map(|v| &v["payload"]) else {
            continue;
        };
        let (Some(id), Some(file), Some(pos)) = (
            p["transaction"]["id"].as_str(),
            p["source"]["file"].as_str(),
            p["source"]["pos"].as_i64(),
        ) else {
            continue;
        };
        if is_gtid(id) && p["source"]["gtid"] == id {
            by_gtid.insert(id.to_string(), format!("file={file},pos={}", pos - shift));
        }
    }
    let mut n = 0;
    for r in got.get_mut(TX_TOPIC).into_iter().flatten() {
        let id = golden_tx::tx_payload(r).and_then(|p| p["id"].as_str().map(String::from));
        if let Some(dbz) = id.and_then(|id| by_gtid.get(&id)) {
            golden_tx::set_id(r, &dbz.clone());
            n += 1;
        }
    }
    n
}

async fn run_sql(my: &MariaDbServer, sql: &str) {
    let mut c = my.root_conn().await.unwrap();
    for s in statements(sql) {
        c.query_drop(&s)
            .await
            .unwrap_or_else(|e| panic!("{s}: {e}"));
    }
    let _ = c.disconnect().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn json_envelope_equals_debezium() {
    let started = Instant::now();
    // A server of our own: the database is called `golden` as in the capture, and the
    // stream's `source.server_id` is the server's id (1 in the capture).
    let my = MariaDbServer::start(MariaDbOptions::default().server_id(1)).unwrap();
    run_sql(&my, SCHEMA_SQL).await;

    let dirs: Vec<_> = CAPTURES
        .iter()
        .map(|_| tempfile::tempdir().unwrap())
        .collect();
    let mut conns: Vec<Connector> = CAPTURES
        .iter()
        .zip(&dirs)
        .enumerate()
        .map(|(i, (cap, dir))| connector(&my, dir.path(), cap, 101 + i as u32))
        .collect();
    let wants: Vec<_> = CAPTURES
        .iter()
        .map(|c| golden(c.golden, SKIPPED_TOPICS))
        .collect();
    let admins: Vec<String> = conns.iter().map(|c| c.fixed_admin_port()).collect();
    for c in &mut conns {
        c.start();
    }
    // As the capture: the changes once every snapshot record is out.
    for (c, want) in conns.iter_mut().zip(&wants) {
        wait_for(
            c,
            want,
            |w| w.iter().filter(|r| is_snapshot(r)).count(),
            "snapshot records",
        )
        .await;
    }
    run_sql(&my, CHANGES_SQL).await;
    // The end of the changes in the binlog: each connector has read up to there (its
    // stream's read position), and a clean stop appends everything read.
    let (end_file, end_pos) = binlog_end(&my).await;

    let mut cmp = Comparison::new(VOLATILE).float_tolerance();
    // Applied in order (see DEVIATIONS).
    let rules: Vec<Rule> = DEVIATIONS.iter().chain(SOURCE_BUGS).copied().collect();
    for (i, ((cap, c), want)) in CAPTURES.iter().zip(&mut conns).zip(&wants).enumerate() {
        wait_read(c, &admins[i], &end_file, end_pos).await;
        assert_eq!(c.stop(), Some(0), "{}", c.output());
        let mut got = read_all(c, want);
        dump(&my, cap, &got);
        check_hidden_headers(cap, &got, &mut cmp);
        // The position shift: ours minus Debezium's, from the first snapshot record.
        let first_pos = |m: &BTreeMap<String, Vec<Record>>| {
            m.values()
                .flatten()
                .find_map(|r| r.value.as_ref().and_then(|v| positions(v).0))
        };
        let shift = first_pos(&got).unwrap_or(0) - first_pos(want).unwrap_or(0);
        golden_tx::check_consistent(cap.name, &got, TX_TOPIC, data_collection, &mut cmp);
        let mapped = map_tx_ids(&mut got, shift);
        cmp.hit(TX_IDS, mapped);
        for (topic, w) in want {
            let g = got.get_mut(topic).unwrap();
            for v in g.iter_mut().filter_map(|r| r.value.as_mut()) {
                unshift(v, shift);
            }
            let mut w = w.clone();
            for (name, missing) in MISSING {
                let before = w.len();
                w.retain(|r| !missing(r));
                if w.len() < before {
                    cmp.hit(name, before - w.len());
                }
            }
            cmp.topic(cap.name, topic, &w, g, &rules);
        }
    }
    let names = DEVIATIONS
        .iter()
        .chain(SOURCE_BUGS)
        .map(|(n, _)| *n)
        .chain(MISSING.iter().map(|(n, _)| *n))
        .chain([TX_IDS]);
    cmp.finish(names, started);
}
