//! Reading a Redis sink's view back, for `cdc verify --sink NAME`.
//!
//! The rows of a table are found through its versions hash
//! ([`super::apply::versions_key`]): its fields are the Redis keys of every row the sink
//! ever wrote (a deleted row keeps its field as a tombstone), so a scan of that hash,
//! followed by a read of those keys, visits exactly the table's live rows, whatever the
//! key template and whatever else lives in the database. Nothing here writes.
//!
//! A `value = "hash"` row reads back as text fields: [`RedisView::normalize`] turns a
//! source row into the same text (strings as they are, anything else as its JSON), as the
//! sink wrote it. A `mode = "invalidate"` sink keeps no rows, so there is nothing to
//! verify: [`RedisView::open`] says so.

use std::sync::Arc;

use cdc_schemas::TableId;
use serde_json::{Map, Value};

use super::apply::{field_text, versions_key, TRUNCATED};
use super::config::{self, Mode, Resolved, ValueKind};
use super::conn::{Cmd, Conn, ConnError, Reply};
use super::IO_TIMEOUT;
use crate::change::{Change, Op};
use crate::config::SinkSpec;
use crate::view_read::{ScanPage, ViewReader, ViewRow};
use crate::SinkError;

const WHAT: &str = "reading the Redis view";

/// A Redis sink's target, read-only.
pub struct RedisView {
    cfg: Resolved,
    conn: Conn,
}

impl RedisView {
    pub async fn open(spec: &SinkSpec) -> Result<RedisView, SinkError> {
        let cfg = config::resolve(spec).map_err(|(k, m)| {
            SinkError::definite(
                "reading a Redis sink's view",
                format!("{k}: {m}"),
                "fix the key",
            )
        })?;
        if cfg.mode == Mode::Invalidate {
            return Err(SinkError::definite(
                "reading a Redis sink's view",
                format!(
                    "sink {} has mode = \"invalidate\": it deletes keys and keeps no rows, so there is no view to compare",
                    spec.name()
                ),
                "verify an upsert sink, or the log (--log)",
            ));
        }
        let conn = Conn::connect(&cfg.address, IO_TIMEOUT).await?;
        Ok(RedisView { cfg, conn })
    }

    /// A change naming `table`'s row of `key`, for the key template.
    fn probe(table: &TableId, key: &Map<String, Value>) -> Change {
        Change {
            topic: Arc::from(""),
            partition: 0,
            offset: 0,
            timestamp_ms: 0,
            op: Op::Read,
            schema: table.schema.as_str().into(),
            table: table.name.as_str().into(),
            key: key.clone(),
            after: None,
            source_ts_ms: None,
            tx: None,
            after_json: None,
            tx_end: None,
        }
    }

    fn io(&self, e: ConnError) -> SinkError {
        e.into_sink_error(&self.cfg.address)
    }

    /// The rows held at `keys` (Redis key names); `None` where none is.
    async fn read(&mut self, keys: &[String]) -> Result<Vec<Option<ViewRow>>, SinkError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        match self.cfg.value {
            ValueKind::Json => {
                let mut out = Vec::with_capacity(keys.len());
                for chunk in keys.chunks(1000) {
                    let mut mget = Cmd::new("MGET");
                    for k in chunk {
                        mget.arg(k.as_bytes());
                    }
                    let r = self.conn.call(mget).await.map_err(|e| self.io(e))?;
                    let Reply::Array(Some(items)) = r else {
                        return Err(unexpected(format!("{r:?}")));
                    };
                    for item in items {
                        out.push(match item {
                            Reply::Bulk(Some(b)) => Some(json_row(&b)),
                            _ => None,
                        });
                    }
                }
                Ok(out)
            }
            ValueKind::Hash => {
                let cmds: Vec<Cmd> = keys
                    .iter()
                    .map(|k| {
                        let mut c = Cmd::new("HGETALL");
                        c.arg(k.as_bytes());
                        c
                    })
                    .collect();
                let mut out = Vec::with_capacity(keys.len());
                for chunk in cmds.chunks(1000) {
                    let replies = self.conn.pipeline(chunk).await.map_err(|e| self.io(e))?;
                    for r in replies {
                        out.push(match r {
                            Reply::Array(Some(fields)) if !fields.is_empty() => {
                                let mut row = Map::new();
                                for p in fields.chunks(2) {
                                    if let [Reply::Bulk(Some(f)), Reply::Bulk(Some(v))] = p {
                                        row.insert(
                                            String::from_utf8_lossy(f).into_owned(),
                                            Value::String(String::from_utf8_lossy(v).into_owned()),
                                        );
                                    }
                                }
                                Some(row)
                            }
                            // A key of another type: not a row of the view.
                            Reply::Array(_) | Reply::Error(_) => None,
                            other => return Err(unexpected(format!("{other:?}"))),
                        });
                    }
                }
                Ok(out)
            }
        }
    }
}

/// A JSON row as stored; a value that is not a JSON object reads as one `"<value>"` field,
/// so it differs from every source row instead of failing the verification.
fn json_row(b: &[u8]) -> ViewRow {
    match serde_json::from_slice::<Value>(b) {
        Ok(Value::Object(m)) => m,
        _ => {
            let mut m = Map::new();
            m.insert(
                "<value>".into(),
                Value::String(String::from_utf8_lossy(b).into_owned()),
            );
            m
        }
    }
}

fn unexpected(what: String) -> SinkError {
    SinkError::transient(WHAT, format!("unexpected reply {what}"))
}

impl ViewReader for RedisView {
    async fn get(
        &mut self,
        table: &TableId,
        keys: &[Map<String, Value>],
    ) -> Result<Vec<Option<ViewRow>>, SinkError> {
        let names: Vec<String> = keys.iter().map(|k| self.id_of(table, k)).collect();
        self.read(&names).await
    }

    async fn count(&mut self, table: &TableId) -> Result<u64, SinkError> {
        let mut n = 0;
        let mut cursor = None;
        loop {
            let page = self.scan(table, cursor, 1000).await?;
            n += page.rows.len() as u64;
            match page.next {
                Some(c) => cursor = Some(c),
                None => return Ok(n),
            }
        }
    }

    async fn scan(
        &mut self,
        table: &TableId,
        cursor: Option<String>,
        max: usize,
    ) -> Result<ScanPage, SinkError> {
        let vh = versions_key(&self.cfg.prefix, &Self::probe(table, &Map::new()));
        let mut hscan = Cmd::new("HSCAN");
        hscan
            .arg(vh.as_bytes())
            .arg(cursor.as_deref().unwrap_or("0").as_bytes())
            .arg(b"COUNT")
            .arg_u64(max.max(1) as u64);
        let r = self.conn.call(hscan).await.map_err(|e| self.io(e))?;
        let (next, items) = match r {
            Reply::Array(Some(v)) if v.len() == 2 => {
                let mut v = v.into_iter();
                match (v.next(), v.next()) {
                    (Some(Reply::Bulk(Some(n))), Some(Reply::Array(Some(items)))) => (n, items),
                    other => return Err(unexpected(format!("{other:?}"))),
                }
            }
            // No versions hash yet: an empty view.
            Reply::Error(e) if e.starts_with("WRONGTYPE") => {
                return Err(SinkError::definite(
                    WHAT,
                    format!("{vh} is not the sink's versions hash ({e})"),
                    "check the sink's prefix; another application uses its keys",
                ))
            }
            other => return Err(unexpected(format!("{other:?}"))),
        };
        let names: Vec<String> = items
            .chunks(2)
            .filter_map(|p| match p.first() {
                Some(Reply::Bulk(Some(f))) if f != TRUNCATED.as_bytes() => {
                    Some(String::from_utf8_lossy(f).into_owned())
                }
                _ => None,
            })
            .collect();
        // Tombstones and expired rows have a field but no key.
        let rows = self.read(&names).await?;
        Ok(ScanPage {
            rows: names
                .into_iter()
                .zip(rows)
                .filter_map(|(id, row)| row.map(|r| (id, Some(r))))
                .collect(),
            next: (next != b"0").then(|| String::from_utf8_lossy(&next).into_owned()),
        })
    }

    fn id_of(&self, table: &TableId, key: &Map<String, Value>) -> String {
        let mut out = String::new();
        self.cfg.template.render(&Self::probe(table, key), &mut out);
        out
    }

    fn normalize(&self, _key: &Map<String, Value>, row: ViewRow) -> ViewRow {
        match self.cfg.value {
            ValueKind::Json => row,
            // As the sink writes a hash: NULL columns left out, the rest as text.
            ValueKind::Hash => row
                .into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| {
                    let text = String::from_utf8_lossy(&field_text(&v)).into_owned();
                    (k, Value::String(text))
                })
                .collect(),
        }
    }
}
