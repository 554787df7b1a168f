//! Encode throughput of the record encoders for a 10-column row (bigint pk, int, text 20,
//! text 100, numeric(12,2), timestamptz, bool, double, uuid, small jsonb): key + value per
//! row into a reused buffer, on one core.
//!
//! Run: `cargo run --release -p cdc-schemas --example encode_bench [seconds-per-format]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_schemas::encode::{
    ConnectorKind, Encoder, EncoderConfig, RecordFormat, SchemaIds, SourceInfo,
};
use cdc_schemas::{
    ChangeEvent, Column, ColumnType, Decimal, Lsn, PgPosition, Row, SourcePosition, TableId,
    TableSchema, Value,
};

fn table() -> Arc<TableSchema> {
    use ColumnType as T;
    Arc::new(
        TableSchema::new(
            TableId::new("public", "orders"),
            vec![
                Column::new("id", T::Int64, "int8").not_null(),
                Column::new("qty", T::Int32, "int4"),
                Column::new("code", T::Text { max_len: Some(20) }, "varchar(20)"),
                Column::new("descr", T::Text { max_len: None }, "text"),
                Column::new(
                    "price",
                    T::Decimal {
                        precision: Some(12),
                        scale: Some(2),
                    },
                    "numeric(12,2)",
                ),
                Column::new("created", T::TimestampTz { precision: None }, "timestamptz"),
                Column::new("paid", T::Bool, "bool"),
                Column::new("weight", T::Float64, "float8"),
                Column::new("ref", T::Uuid, "uuid"),
                Column::new("attrs", T::Json, "jsonb"),
            ],
            &["id"],
        )
        .expect("valid table"),
    )
}

fn events(t: &Arc<TableSchema>, n: usize) -> Vec<ChangeEvent> {
    (0..n)
        .map(|i| {
            let i = i as i64;
            let row = Row::new(vec![
                Value::Int64(1_000_000 + i),
                Value::Int32((i % 97) as i32),
                Value::Text(format!("SKU-{:016}", i)),
                Value::Text(format!(
                    "{:0>100}",
                    format!("a fairly ordinary product description {i}")
                )),
                Value::Decimal(Decimal::new((123_456 + i).into(), 2)),
                Value::TimestampTz(1_740_218_268_517_360 + i * 1_000),
                Value::Bool(i % 2 == 0),
                Value::Float64(12.5 + i as f64 / 7.0),
                Value::Uuid([(i % 251) as u8; 16]),
                Value::Json(format!("{{\"color\": \"red\", \"n\": {i}}}")),
            ]);
            let pos = SourcePosition::Postgres(PgPosition {
                commit_lsn: Lsn(2_078_959_952 + i as u64 * 100),
                lsn: Lsn(2_078_978_480 + i as u64 * 100),
                tx_id: Some(32_545),
                xmin: None,
            });
            ChangeEvent::create(t.clone(), row, pos, 1_740_218_268_541).expect("row fits")
        })
        .collect()
}

/// Nanoseconds this thread has spent on a CPU (Linux `schedstat`), so figures stay
/// meaningful on a shared, loaded machine; `None` elsewhere.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

fn bench(name: &str, format: RecordFormat, evs: &[ChangeEvent], t: &TableSchema, secs: f64) {
    let mut src = SourceInfo::new(ConnectorKind::Postgres, "shop", "inventory");
    src.version = "bench".into();
    let mut enc = Encoder::new(&EncoderConfig::new(src, format), t).expect("encoder");
    enc.set_schema_ids(SchemaIds {
        key: Some(1),
        value: 2,
    });
    let mut key = Vec::with_capacity(256);
    let mut val = Vec::with_capacity(8192);
    let mut rows = 0u64;
    let mut bytes = 0u64;
    let now = 1_740_218_269_005_541_665;
    let budget = Duration::from_secs_f64(secs);
    let start = Instant::now();
    let cpu0 = thread_cpu_ns();
    while start.elapsed() < budget {
        for ev in evs {
            key.clear();
            val.clear();
            enc.encode_key(ev, &mut key).expect("key");
            enc.encode_value_at(ev, now, &mut val).expect("value");
            bytes += (key.len() + val.len()) as u64;
        }
        rows += evs.len() as u64;
    }
    let wall = start.elapsed().as_secs_f64();
    // Per CPU-second of this thread when available (wall time on an idle machine).
    let el = match (cpu0, thread_cpu_ns()) {
        (Some(a), Some(b)) if b > a => (b - a) as f64 / 1e9,
        _ => wall,
    };
    println!(
        "{name:<22} {:>10.0} rows/s  {:>8.1} MB/s  {:>6.0} ns/row  {:>5} B/row (key+value)  [cpu {:.2} s of wall {:.2} s]",
        rows as f64 / el,
        bytes as f64 / el / 1e6,
        el * 1e9 / rows as f64,
        bytes / rows,
        el,
        wall
    );
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let t = table();
    let evs = events(&t, 4096);
    println!(
        "10-column row, key + value per row, one thread, {secs} s per format, rates per CPU-second"
    );
    bench(
        "JSON payload-only",
        RecordFormat::Json {
            schemas_enable: false,
        },
        &evs,
        &t,
        secs,
    );
    bench(
        "JSON with schemas",
        RecordFormat::Json {
            schemas_enable: true,
        },
        &evs,
        &t,
        secs,
    );
    bench("Avro (Confluent)", RecordFormat::Avro, &evs, &t, secs);
}
