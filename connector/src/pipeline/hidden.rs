//! Values the record format could not carry (`cdc_schemas::encode::hidden`): each one
//! travels in a `cdc.unrepresentable.<image>.<column>` header of its record; here they are
//! counted on `/metrics` as `cdc_unrepresentable_values_total{table,column,reason}` and
//! warned about once per table, column and reason (the log line names them and never holds
//! the value: the header does).
//!
//! Shared by every attempt of `cdc run` (cheap to clone), so a restart does not warn again.
//! The check per appended piece is one length test: records without such values cost
//! nothing here.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use cdc_schemas::encode::{HiddenReason, RecordBuf};
use cdc_schemas::metrics::{Counter, Metrics};

const METRIC: &str = "cdc_unrepresentable_values_total";
const HELP: &str = "Values the record format could not carry, carried in a cdc.unrepresentable.<image>.<column> record header instead";

type Key = (String, String, HiddenReason);

#[derive(Clone, Default)]
pub struct HiddenValues {
    metrics: Metrics,
    counters: Arc<Mutex<HashMap<Key, Counter>>>,
    warned: Arc<Mutex<HashSet<Key>>>,
}

impl HiddenValues {
    pub fn new(metrics: &Metrics) -> Self {
        HiddenValues {
            metrics: metrics.clone(),
            ..Default::default()
        }
    }

    /// Counts (and warns once about) every hidden value of `buf`'s records.
    #[inline]
    pub fn report(&self, buf: &RecordBuf) {
        if buf.total_headers() == 0 {
            return;
        }
        self.report_slow(buf);
    }

    #[cold]
    fn report_slow(&self, buf: &RecordBuf) {
        for h in buf.hidden_values() {
            let key: Key = (h.table.to_string(), h.column.to_string(), h.reason);
            let counter = {
                let mut counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
                counters
                    .entry(key.clone())
                    .or_insert_with(|| {
                        let name = format!(
                            "{METRIC}{{table=\"{}\",column=\"{}\",reason=\"{}\"}}",
                            label(h.table),
                            label(h.column),
                            h.reason.label()
                        );
                        self.metrics.counter(&name, HELP)
                    })
                    .clone()
            };
            counter.inc();
            let first = self
                .warned
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key);
            if first {
                tracing::warn!(
                    table = h.table,
                    column = h.column,
                    reason = h.reason.label(),
                    header = h.header,
                    "a value the record format cannot carry: the record holds Debezium's stand-in and the exact value is in the record header named here (warned once per table and column; counted in cdc_unrepresentable_values_total; format.unrepresentable_handling_mode = \"fail\" stops instead)"
                );
            }
        }
    }

    #[cfg(test)]
    fn count(&self, table: &str, column: &str, reason: HiddenReason) -> u64 {
        let counters = self.counters.lock().unwrap();
        counters
            .get(&(table.to_string(), column.to_string(), reason))
            .map_or(0, Counter::get)
    }
}

/// A Prometheus label value: `\`, `"` and newlines escaped.
fn label(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use cdc_schemas::encode::{ConnectorKind, Encoder, EncoderConfig, RecordFormat, SourceInfo};
    use cdc_schemas::{
        ChangeEvent, Column, ColumnType, Decimal, Lsn, PgPosition, Row, SourcePosition, TableId,
        TableSchema, Value,
    };

    #[test]
    fn counts_every_value_and_exports_labels() {
        let t = Arc::new(
            TableSchema::new(
                TableId::new("public", "t"),
                vec![
                    Column::new("id", ColumnType::Int32, "int4").not_null(),
                    Column::new(
                        "we\"ird",
                        ColumnType::Decimal {
                            precision: None,
                            scale: None,
                        },
                        "numeric",
                    ),
                ],
                &["id"],
            )
            .unwrap(),
        );
        let cfg = EncoderConfig::new(
            SourceInfo::new(ConnectorKind::Postgres, "p", "db"),
            RecordFormat::Json {
                schemas_enable: false,
            },
        );
        let enc = Encoder::new(&cfg, &t).unwrap();
        let pos = SourcePosition::Postgres(PgPosition {
            commit_lsn: Lsn(1),
            lsn: Lsn(1),
            tx_id: None,
            xmin: None,
        });
        let mut buf = RecordBuf::new();
        for id in 0..3 {
            let row = Row::new(vec![Value::Int32(id), Value::Decimal(Decimal::NaN)]);
            let ev = ChangeEvent::create(t.clone(), row, pos.clone(), 0).unwrap();
            enc.records_into(&ev, 0, &mut buf).unwrap();
        }
        let metrics = Metrics::default();
        let h = HiddenValues::new(&metrics);
        h.report(&buf);
        assert_eq!(
            h.count("public.t", "we\"ird", HiddenReason::NumericSpecial),
            3
        );
        let mut text = String::new();
        metrics.render(&mut text);
        assert!(
            text.contains(
                "cdc_unrepresentable_values_total{table=\"public.t\",column=\"we\\\"ird\",reason=\"numeric_nan_infinity\"} 3"
            ),
            "{text}"
        );
    }
}
