//! The MySQL source's value decoding against a real MariaDB: a table with every type,
//! rows of edge values, read back (a) with `SELECT` over the text protocol through
//! `decode::text_value` and (b) from the binlog's WRITE_ROWS events through
//! `decode::binlog_value` (and the whole-row `TableDecoder`). Both paths must give the
//! same `Value` per column, and that value must be the exact expected one.

use cdc_harness::MariaDbServer;
use cdc_schemas::encode::{ConnectorKind, Encoder, EncoderConfig, RecordFormat, SourceInfo};
use cdc_schemas::{ChangeEvent, Decimal, MySqlPosition, Row, SourcePosition, Value};
use cdc_sources::mysql::decode::{self, DecodeOptions, TableDecoder, ZeroDateMode};
use cdc_sources::mysql::table::{MyColumn, MyTable};
use futures_util::StreamExt;
use mysql_async::binlog::events::{EventData, RowsEventData};
use mysql_async::prelude::Queryable;
use mysql_async::BinlogStreamRequest;

const DDL: &str = r"CREATE TABLE t (
  id INT PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
  mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED,
  bi BIGINT, biu BIGINT UNSIGNED,
  d65 DECIMAL(65,30), d10 DECIMAL(10,2),
  f FLOAT, dbl DOUBLE,
  b1 BIT(1), b10 BIT(10), b64 BIT(64),
  dt DATE, dtm0 DATETIME, dtm3 DATETIME(3), dtm6 DATETIME(6),
  ts0 TIMESTAMP NULL DEFAULT NULL, ts6 TIMESTAMP(6) NULL DEFAULT NULL,
  tm0 TIME, tm3 TIME(3), tm6 TIME(6),
  y YEAR,
  c_latin1 VARCHAR(20) CHARACTER SET latin1, c_utf8 VARCHAR(20) CHARACTER SET utf8mb4,
  ch CHAR(5) CHARACTER SET utf8mb3, tx TEXT CHARACTER SET utf8mb4,
  c_ascii VARCHAR(5) CHARACTER SET ascii,
  bin4 BINARY(4), vb VARBINARY(10), bl BLOB,
  e ENUM('a','b''c','x,y','\\'), s SET('p','q''r','s','n\nl'),
  j JSON,
  g GEOMETRY, p POINT,
  gen_v INT AS (ti + 1) VIRTUAL, gen_s VARCHAR(30) AS (CONCAT(c_utf8, '!')) STORED,
  dz DATE NOT NULL DEFAULT '2000-01-01',
  a6 INET6, u UUID
) ENGINE=InnoDB";

const INSERTS: &[&str] = &[
    // 1: maxima and non-ASCII text
    r#"INSERT INTO t (id, ti, tiu, si, siu, mi, miu, i, iu, bi, biu, d65, d10, f, dbl,
      b1, b10, b64, dt, dtm0, dtm3, dtm6, ts0, ts6, tm0, tm3, tm6, y,
      c_latin1, c_utf8, ch, tx, c_ascii, bin4, vb, bl, e, s, j, g, p, dz, a6, u) VALUES
     (1, 127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295,
      9223372036854775807, 18446744073709551615,
      99999999999999999999999999999999999.999999999999999999999999999999, 99999999.99,
      1234.5677, 1.7976931348623157e308,
      b'1', b'1000000001', b'1111111111111111111111111111111111111111111111111111111111111111',
      '9999-12-31', '9999-12-31 23:59:59', '2024-02-29 12:34:56.789', '1000-01-01 00:00:00.000001',
      '2038-01-19 03:14:07', '1970-01-01 00:00:01.000001',
      '838:59:59', '838:59:59.000', '-01:02:03.456789', 2155,
      'café €‰', 'žluť 😀', 'ab', 'a longer text ✓', 'abc',
      'a\0', x'00FF00', x'DEADBEEF', 'b''c', 'p,s', '{"a": [1, "x"]}',
      ST_GeomFromText('LINESTRING(0 0,1 1)', 4326), POINT(1, 2), '2024-01-31',
      '2001:db8::ff00:42:8329', '123e4567-e89b-12d3-a456-426655440000')"#,
    // 2: minima
    r#"INSERT INTO t (id, ti, tiu, si, siu, mi, miu, i, iu, bi, biu, d65, d10, f, dbl,
      b1, b10, b64, dt, dtm0, dtm3, dtm6, ts0, ts6, tm0, tm3, tm6, y,
      c_latin1, c_utf8, ch, tx, c_ascii, bin4, vb, bl, e, s, j, g, p, dz, a6, u) VALUES
     (2, -128, 0, -32768, 0, -8388608, 0, -2147483648, 0,
      -9223372036854775808, 0,
      -99999999999999999999999999999999999.999999999999999999999999999999, -0.01,
      -0.25, -2.2250738585072014e-308,
      b'0', b'0', b'0',
      '1000-01-01', '1000-01-01 00:00:00', '1970-01-01 00:00:00.001', '2000-02-29 23:59:59.999999',
      '1970-01-01 00:00:01', '2038-01-19 03:14:07.999999',
      '-838:59:59', '-00:00:01.500', '00:00:00.000001', 1901,
      '', '', '', '', '',
      '', '', '', '\\', 'n\nl', '[]',
      POINT(0, 0), POINT(-1.5, 1e300), '1970-01-01',
      '::ffff:1.2.3.4', '00000000-0000-0000-0000-000000000000')"#,
    // 3: zero and partial dates (sql_mode = ''), an invalid enum value
    r#"INSERT INTO t (id, dt, dtm0, dtm3, dtm6, ts0, ts6, y, e, dz) VALUES
     (3, '0000-00-00', '0000-00-00 00:00:00', '2024-00-10 10:00:00', '2024-05-00 00:00:00',
      '0000-00-00 00:00:00', '0000-00-00 00:00:00', '0000', 'nope', '0000-00-00')"#,
    // 4: NULLs
    r#"INSERT INTO t (id, dz) VALUES (4, '2000-02-29')"#,
    // 5: small decimals, negative times just below zero, half seconds
    r#"INSERT INTO t (id, d65, d10, dtm6, ts6, tm3, tm6, dz) VALUES
     (5, 0.000000000000000000000000000001, -0.5, '2024-06-30 23:59:59.5',
      '2024-06-30 23:59:59.5', '-00:00:00.001', '-00:00:00.000001', '2000-01-01')"#,
];

fn days(y: i64, m: u32, d: u32) -> i32 {
    // Days since 1970-01-01 (proleptic Gregorian), independent of the decoder's own.
    let mut n: i64 = 0;
    let leap = |y: i64| y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let mdays = |y: i64, m: u32| match m {
        2 if leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if y >= 1970 {
        for yy in 1970..y {
            n += if leap(yy) { 366 } else { 365 };
        }
    } else {
        for yy in y..1970 {
            n -= if leap(yy) { 366 } else { 365 };
        }
    }
    for mm in 1..m {
        n += mdays(y, mm);
    }
    (n + d as i64 - 1) as i32
}

fn micros(y: i64, mo: u32, d: u32, h: i64, mi: i64, s: i64, us: i64) -> i64 {
    days(y, mo, d) as i64 * 86_400_000_000 + ((h * 60 + mi) * 60 + s) * 1_000_000 + us
}

fn dec(s: &str) -> Value {
    Value::Decimal(s.parse::<Decimal>().unwrap())
}

fn text(s: &str) -> Value {
    Value::Text(s.into())
}

fn bits(len: u32, bytes: &[u8]) -> Value {
    Value::Bits {
        len,
        bytes: bytes.to_vec(),
    }
}

fn geom(srid: u32, wkb: &[u8]) -> Value {
    let mut b = srid.to_le_bytes().to_vec();
    b.extend_from_slice(wkb);
    Value::Bytes(b)
}

fn wkb_point(x: f64, y: f64) -> Vec<u8> {
    let mut b = vec![1, 1, 0, 0, 0];
    b.extend_from_slice(&x.to_le_bytes());
    b.extend_from_slice(&y.to_le_bytes());
    b
}

/// The expected value of every column, by row id.
fn expected(id: i32, col: &str) -> Value {
    use Value::*;
    let nines = "99999999999999999999999999999999999.999999999999999999999999999999";
    match (id, col) {
        (_, "id") => Int32(id),
        (1, "ti") => Int16(127),
        (1, "tiu") => Int16(255),
        (1, "si") => Int16(32767),
        (1, "siu") => Int32(65535),
        (1, "mi") => Int32(8388607),
        (1, "miu") => Int32(16777215),
        (1, "i") => Int32(i32::MAX),
        (1, "iu") => Int64(4294967295),
        (1, "bi") => Int64(i64::MAX),
        (1, "biu") => UInt64(u64::MAX),
        (1, "d65") => dec(nines),
        (1, "d10") => dec("99999999.99"),
        (1, "f") => Float32(1234.5677),
        (1, "dbl") => Float64(f64::MAX),
        (1, "b1") => bits(1, &[0x80]),
        (1, "b10") => bits(10, &[0x80, 0x40]),
        (1, "b64") => bits(64, &[0xff; 8]),
        (1, "dt") => Date(days(9999, 12, 31)),
        (1, "dtm0") => Timestamp(micros(9999, 12, 31, 23, 59, 59, 0)),
        (1, "dtm3") => Timestamp(micros(2024, 2, 29, 12, 34, 56, 789_000)),
        (1, "dtm6") => Timestamp(micros(1000, 1, 1, 0, 0, 0, 1)),
        (1, "ts0") => TimestampTz(2_147_483_647_000_000),
        (1, "ts6") => TimestampTz(1_000_001),
        (1, "tm0") | (1, "tm3") => Time((838 * 3600 + 59 * 60 + 59) * 1_000_000),
        (1, "tm6") => Time(-(3_723_000_000 + 456_789)),
        (1, "y") => Int32(2155),
        (1, "c_latin1") => text("café €‰"),
        (1, "c_utf8") => text("žluť 😀"),
        (1, "ch") => text("ab"),
        (1, "tx") => text("a longer text ✓"),
        (1, "c_ascii") => text("abc"),
        (1, "bin4") => Bytes(b"a\0\0\0".to_vec()),
        (1, "vb") => Bytes(vec![0, 0xff, 0]),
        (1, "bl") => Bytes(vec![0xde, 0xad, 0xbe, 0xef]),
        (1, "e") => text("b'c"),
        (1, "s") => text("p,s"),
        (1, "j") => text(r#"{"a": [1, "x"]}"#),
        (1, "g") => {
            let mut wkb = vec![1, 2, 0, 0, 0, 2, 0, 0, 0];
            for c in [0f64, 0., 1., 1.] {
                wkb.extend_from_slice(&c.to_le_bytes());
            }
            geom(4326, &wkb)
        }
        (1, "p") => geom(0, &wkb_point(1.0, 2.0)),
        (1, "gen_v") => Int32(128),
        (1, "gen_s") => text("žluť 😀!"),
        (1, "dz") => Date(days(2024, 1, 31)),
        (1, "a6") => text("2001:db8::ff00:42:8329"),
        (1, "u") => text("123e4567-e89b-12d3-a456-426655440000"),

        (2, "ti") => Int16(-128),
        (2, "si") => Int16(-32768),
        (2, "mi") => Int32(-8388608),
        (2, "i") => Int32(i32::MIN),
        (2, "bi") => Int64(i64::MIN),
        (2, "tiu") => Int16(0),
        (2, "siu") | (2, "miu") => Int32(0),
        (2, "iu") => Int64(0),
        (2, "biu") => UInt64(0),
        (2, "d65") => dec(&format!("-{nines}")),
        (2, "d10") => dec("-0.01"),
        (2, "f") => Float32(-0.25),
        (2, "dbl") => Float64(-2.2250738585072014e-308),
        (2, "b1") => bits(1, &[0]),
        (2, "b10") => bits(10, &[0, 0]),
        (2, "b64") => bits(64, &[0; 8]),
        (2, "dt") => Date(days(1000, 1, 1)),
        (2, "dtm0") => Timestamp(micros(1000, 1, 1, 0, 0, 0, 0)),
        (2, "dtm3") => Timestamp(1_000),
        (2, "dtm6") => Timestamp(micros(2000, 2, 29, 23, 59, 59, 999_999)),
        (2, "ts0") => TimestampTz(1_000_000),
        (2, "ts6") => TimestampTz(2_147_483_647_999_999),
        (2, "tm0") => Time(-(838 * 3600 + 59 * 60 + 59) * 1_000_000),
        (2, "tm3") => Time(-1_500_000),
        (2, "tm6") => Time(1),
        (2, "y") => Int32(1901),
        (2, "c_latin1" | "c_utf8" | "ch" | "tx" | "c_ascii") => text(""),
        (2, "gen_s") => text("!"),
        (2, "s") => text("n\nl"),
        (2, "gen_v") => Int32(-127),
        (2, "bin4") => Bytes(vec![0; 4]),
        (2, "vb" | "bl") => Bytes(vec![]),
        (2, "e") => text("\\"),
        (2, "j") => text("[]"),
        (2, "g") => geom(0, &wkb_point(0.0, 0.0)),
        (2, "p") => geom(0, &wkb_point(-1.5, 1e300)),
        (2, "dz") => Date(0),
        (2, "a6") => text("::ffff:1.2.3.4"),
        (2, "u") => text("00000000-0000-0000-0000-000000000000"),

        // Debezium's default for zero and partial dates: NULL, or the epoch when NOT NULL.
        (3, "dt" | "dtm0" | "dtm3" | "dtm6" | "ts0" | "ts6") => Null,
        (3, "y") => Int32(0),
        // An invalid ENUM value (non-strict mode) is stored as index 0, the empty string.
        (3, "e") => text(""),
        (3, "dz") => Date(0),

        (4, "dz") => Date(days(2000, 2, 29)),
        (5, "d65") => dec("0.000000000000000000000000000001"),
        (5, "d10") => dec("-0.50"),
        (5, "dtm6") => Timestamp(micros(2024, 6, 30, 23, 59, 59, 500_000)),
        (5, "ts6") => TimestampTz(micros(2024, 6, 30, 23, 59, 59, 500_000)),
        (5, "tm3") => Time(-1_000),
        (5, "tm6") => Time(-1),
        (5, "dz") => Date(days(2000, 1, 1)),
        (3..=5, _) => Null,
        (id, c) => panic!("no expected value for row {id} column {c}"),
    }
}

/// The server's text of the zero/partial dates of row 3, in `raw` mode.
fn expected_raw(col: &str) -> Option<&'static str> {
    Some(match col {
        "dt" => "0000-00-00",
        "dtm0" => "0000-00-00 00:00:00",
        "dtm3" => "2024-00-10 10:00:00.000",
        "dtm6" => "2024-05-00 00:00:00.000000",
        "ts0" => "0000-00-00 00:00:00",
        "ts6" => "0000-00-00 00:00:00.000000",
        "dz" => "0000-00-00",
        _ => return None,
    })
}

async fn columns(conn: &mut mysql_async::Conn, db: &str) -> Vec<MyColumn> {
    let rows: Vec<mysql_async::Row> = conn
        .exec(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME, IS_NULLABLE, \
             COLUMN_DEFAULT, EXTRA FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 't' ORDER BY ORDINAL_POSITION",
            (db,),
        )
        .await
        .unwrap();
    rows.into_iter()
        .map(|r| {
            let s = |i: usize| r.get::<Option<String>, _>(i).flatten();
            MyColumn {
                name: s(0).unwrap(),
                data_type: s(1).unwrap().to_ascii_lowercase(),
                column_type: s(2).unwrap(),
                charset: s(3),
                nullable: s(4).as_deref() == Some("YES"),
                default: s(5),
                generated: s(6)
                    .unwrap_or_default()
                    .to_ascii_uppercase()
                    .contains("GENERATED")
                    || s(6)
                        .unwrap_or_default()
                        .to_ascii_uppercase()
                        .contains("VIRTUAL")
                    || s(6)
                        .unwrap_or_default()
                        .to_ascii_uppercase()
                        .contains("PERSISTENT"),
            }
        })
        .collect()
}

#[tokio::test]
async fn every_type_same_value_from_select_and_binlog() {
    let my = MariaDbServer::shared();
    let db = my.create_database().await.unwrap();
    let mut conn = my.root_conn().await.unwrap();
    conn.query_drop(format!("USE `{db}`")).await.unwrap();
    conn.query_drop("SET NAMES utf8mb4").await.unwrap();
    conn.query_drop("SET SESSION sql_mode = ''").await.unwrap();
    conn.query_drop("SET time_zone = '+00:00'").await.unwrap();
    conn.query_drop(DDL).await.unwrap();

    let status: mysql_async::Row = conn
        .query_first("SHOW MASTER STATUS")
        .await
        .unwrap()
        .expect("binlog on");
    let file: String = status.get(0).unwrap();
    let pos: u64 = status.get(1).unwrap();
    for sql in INSERTS {
        conn.query_drop(*sql).await.unwrap();
    }

    let cols = columns(&mut conn, &db).await;
    assert_eq!(cols.len(), 46, "{cols:?}");
    assert!(cols.iter().any(|c| c.name == "gen_v" && c.generated));
    let table = MyTable {
        database: db.clone(),
        name: "t".into(),
        columns: cols.clone(),
        key: vec!["id".into()],
    };
    table.schema().unwrap();
    let td = TableDecoder::new(&table);
    let opts = DecodeOptions::default();
    let raw = DecodeOptions {
        zero_date: ZeroDateMode::Raw,
    };

    // (a) The snapshot's path: SELECT over the text protocol, time_zone +00:00.
    let list: Vec<String> = cols
        .iter()
        .map(|c| decode::select_expr(c, &format!("`{}`", c.name)).into_owned())
        .collect();
    let select = format!("SELECT {} FROM t ORDER BY id", list.join(", "));
    let mut result = conn.query_iter(select).await.unwrap();
    let rows: Vec<mysql_async::Row> = result.collect().await.unwrap();
    drop(result);
    assert_eq!(rows.len(), INSERTS.len());
    let mut from_text: Vec<Vec<Value>> = Vec::new();
    let mut raw_text: Vec<Vec<Value>> = Vec::new();
    for row in &rows {
        let cells: Vec<Option<&[u8]>> = (0..cols.len())
            .map(|i| match row.as_ref(i) {
                Some(mysql_async::Value::Bytes(b)) => Some(b.as_slice()),
                Some(mysql_async::Value::NULL) | None => None,
                Some(other) => panic!("text protocol gave {other:?}"),
            })
            .collect();
        let vals: Vec<Value> = cols
            .iter()
            .zip(&cells)
            .map(|(c, v)| decode::text_value(c, *v, &opts))
            .collect();
        assert_eq!(td.row_from_text(cells.iter().copied(), &opts), vals);
        from_text.push(vals);
        raw_text.push(td.row_from_text(cells.iter().copied(), &raw));
    }
    conn.disconnect().await.unwrap();

    // (b) The stream's path: WRITE_ROWS events from the position before the inserts.
    let mut bconn = my.root_conn().await.unwrap();
    bconn
        .query_drop("SET @mariadb_slave_capability = 4")
        .await
        .unwrap();
    let mut stream = bconn
        .get_binlog_stream(
            BinlogStreamRequest::new(4_000_001)
                .with_filename(file.as_bytes())
                .with_pos(pos)
                .with_non_blocking(),
        )
        .await
        .unwrap();
    let mut from_binlog: Vec<Vec<Value>> = Vec::new();
    let mut raw_binlog: Vec<Vec<Value>> = Vec::new();
    while let Some(event) = stream.next().await {
        let event = event.unwrap();
        let Some(EventData::RowsEvent(rows_event)) = event.read_data().unwrap() else {
            continue;
        };
        let tme = stream
            .get_tme(rows_event.table_id())
            .expect("table map before rows")
            .clone();
        if tme.database_name() != db.as_str() || tme.table_name() != "t" {
            continue;
        }
        assert!(
            matches!(
                rows_event,
                RowsEventData::WriteRowsEvent(_) | RowsEventData::WriteRowsEventV1(_)
            ),
            "only inserts were made"
        );
        assert_eq!(
            tme.columns_count() as usize,
            cols.len(),
            "the table map lists every column, virtual ones included"
        );
        let present: Vec<bool> = rows_event
            .columns_after_image()
            .expect("an insert has an after image")
            .iter()
            .by_vals()
            .collect();
        for r in rows_event.rows(&tme) {
            let (_, after) = r.unwrap();
            let after = after.expect("after image");
            let values = after.unwrap();
            assert_eq!(values.len(), cols.len());
            let vals: Vec<Value> = cols
                .iter()
                .zip(&values)
                .map(|(c, v)| decode::binlog_value(c, v, &opts))
                .collect();
            assert_eq!(
                td.row_from_binlog(values.clone(), present.iter().copied(), &opts),
                vals
            );
            raw_binlog.push(td.row_from_binlog(values, present.iter().copied(), &raw));
            from_binlog.push(vals);
        }
    }
    stream.close().await.unwrap();
    assert_eq!(from_binlog.len(), INSERTS.len());

    for (r, (t, b)) in from_text.iter().zip(&from_binlog).enumerate() {
        let id = r as i32 + 1;
        for (i, c) in cols.iter().enumerate() {
            let want = expected(id, &c.name);
            assert_eq!(t[i], want, "row {id} column {} via SELECT", c.name);
            assert_eq!(b[i], want, "row {id} column {} via the binlog", c.name);
        }
    }

    encode_as_debezium(&table, &from_binlog[0]);
    encode_raw_zero_dates(&table, &raw_binlog[2]);

    // Raw zero dates: the server's text, the same from both paths.
    for (i, c) in cols.iter().enumerate() {
        let (t, b) = (&raw_text[2][i], &raw_binlog[2][i]);
        assert_eq!(t, b, "raw mode, row 3 column {}", c.name);
        match expected_raw(&c.name) {
            Some(s) => match t {
                Value::Raw(r) => assert_eq!(r.text, s, "column {}", c.name),
                other => panic!("column {}: not raw: {other:?}", c.name),
            },
            None => assert_eq!(*t, expected(3, &c.name), "column {}", c.name),
        }
    }
}

/// A MariaDB JSON encoder for `table` (`schemas_enable` as given) and `row` as a create
/// event of it.
fn json_encoder(table: &MyTable, row: &[Value], schemas_enable: bool) -> (Encoder, ChangeEvent) {
    let schema = table.schema().unwrap();
    let cfg = EncoderConfig::new(
        SourceInfo::new(ConnectorKind::MariaDb, "srv", ""),
        RecordFormat::Json { schemas_enable },
    );
    let enc = Encoder::new(&cfg, &schema).unwrap();
    let ev = ChangeEvent::create(
        schema,
        Row::new(row.to_vec()),
        SourcePosition::Mysql(MySqlPosition::default()),
        0,
    )
    .unwrap();
    (enc, ev)
}

/// Row 1 through the encoder (MariaDB, JSON with schemas): each field's Connect schema
/// and value as Debezium 3.6's MySQL/MariaDB connector writes them.
fn encode_as_debezium(table: &MyTable, row: &[Value]) {
    let (enc, ev) = json_encoder(table, row, true);
    let mut out = Vec::new();
    enc.encode_value_at(&ev, 0, &mut out).unwrap();
    let j: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let after = &j["payload"]["after"];
    let fields = j["schema"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["field"] == "after")
        .unwrap()["fields"]
        .as_array()
        .unwrap()
        .clone();
    let field = |name: &str| fields.iter().find(|f| f["field"] == name).unwrap().clone();
    let check = |name: &str, ty: &str, semantic: Option<&str>, value: serde_json::Value| {
        let f = field(name);
        assert_eq!(f["type"], ty, "{name}: {f}");
        assert_eq!(f["name"].as_str(), semantic, "{name}: {f}");
        assert_eq!(after[name], value, "{name}");
    };
    use serde_json::json;
    check("ti", "int16", None, json!(127));
    check("tiu", "int16", None, json!(255));
    check("siu", "int32", None, json!(65535));
    check("miu", "int32", None, json!(16777215));
    check("iu", "int64", None, json!(4294967295u32));
    // bigint.unsigned.handling.mode=long: Debezium wraps (the exact value goes in a header).
    check("biu", "int64", None, json!(-1));
    check(
        "d10",
        "bytes",
        Some("org.apache.kafka.connect.data.Decimal"),
        json!("AlQL4/8="), // 9999999999 unscaled
    );
    assert_eq!(field("d65")["parameters"]["scale"], "30");
    assert_eq!(
        field("d65")["parameters"]["connect.decimal.precision"],
        "65"
    );
    check("f", "float", None, json!(1234.5677)); // the float's shortest text
    check("dbl", "double", None, json!(f64::MAX));
    check("b1", "boolean", None, json!(true));
    check("b10", "bytes", Some("io.debezium.data.Bits"), json!("AQI="));
    assert_eq!(field("b10")["parameters"]["length"], "10");
    check("dt", "int32", Some("io.debezium.time.Date"), json!(2932896));
    check(
        "dtm0",
        "int64",
        Some("io.debezium.time.Timestamp"),
        json!(253402300799000i64),
    );
    check(
        "dtm3",
        "int64",
        Some("io.debezium.time.Timestamp"),
        json!(1709210096789i64),
    );
    check(
        "dtm6",
        "int64",
        Some("io.debezium.time.MicroTimestamp"),
        json!(-30610224000000000i64 + 1),
    );
    check(
        "ts0",
        "string",
        Some("io.debezium.time.ZonedTimestamp"),
        json!("2038-01-19T03:14:07Z"),
    );
    check(
        "ts6",
        "string",
        Some("io.debezium.time.ZonedTimestamp"),
        json!("1970-01-01T00:00:01.000001Z"),
    );
    check(
        "tm0",
        "int64",
        Some("io.debezium.time.MicroTime"),
        json!(3020399000000i64),
    );
    check("y", "int32", Some("io.debezium.time.Year"), json!(2155));
    check("e", "string", Some("io.debezium.data.Enum"), json!("b'c"));
    // Debezium's MySQL connector escapes a comma inside a member (the golden capture).
    assert_eq!(field("e")["parameters"]["allowed"], "a,b'c,x\\,y,\\");
    check(
        "s",
        "string",
        Some("io.debezium.data.EnumSet"),
        json!("p,s"),
    );
    // MariaDB's JSON is LONGTEXT: a plain string, as Debezium's MariaDB connector has it.
    check("j", "string", None, json!(r#"{"a": [1, "x"]}"#));
    check("bin4", "bytes", None, json!("YQAAAA=="));
    check("c_latin1", "string", None, json!("café €‰"));
    let g = field("g");
    assert_eq!(g["type"], "struct");
    assert_eq!(g["name"], "io.debezium.data.geometry.Geometry");
    assert_eq!(after["g"]["srid"], 4326);
    assert_eq!(
        after["g"]["wkb"],
        "AQIAAAACAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAPA/AAAAAAAA8D8="
    );
    let p = field("p");
    assert_eq!(p["name"], "io.debezium.data.geometry.Point");
    assert_eq!(after["p"]["x"], 1.0);
    assert_eq!(after["p"]["y"], 2.0);
    assert_eq!(after["p"]["srid"], serde_json::Value::Null);
}

/// Row 3 in `raw` zero-date mode through the encoder: each zero or partial date is what
/// Debezium writes (null; the epoch in the NOT NULL column) and its server text travels
/// in a `cdc.unrepresentable.after.<column>` header.
fn encode_raw_zero_dates(table: &MyTable, row: &[Value]) {
    let (enc, ev) = json_encoder(table, row, false);
    let rec = enc.records(&ev, 0).unwrap().remove(0);
    let j: serde_json::Value = serde_json::from_slice(rec.value.as_ref().unwrap()).unwrap();
    let after = &j["after"];
    for c in ["dt", "dtm0", "dtm3", "dtm6", "ts0", "ts6"] {
        assert_eq!(after[c], serde_json::Value::Null, "{c}");
    }
    assert_eq!(after["dz"], 0);
    for c in ["dt", "dtm0", "dtm3", "dtm6", "ts0", "ts6", "dz"] {
        let key = format!("cdc.unrepresentable.after.{c}");
        let h = rec.headers.iter().find(|(k, _)| *k == key);
        let want = expected_raw(c).unwrap();
        assert_eq!(
            h.map(|(_, v)| String::from_utf8_lossy(v).into_owned()),
            Some(want.to_string()),
            "{key}"
        );
    }
}
