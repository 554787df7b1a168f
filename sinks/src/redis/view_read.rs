//! Reading a Redis sink's view back, for `cdc verify --sink NAME`.
//!
//! The rows of a table are found through its rows sets, one per partition of its topic
//! ([`super::apply::push_rows_key`]): their members are the Redis keys of the rows the
//! sink holds, so a scan of those sets, followed by a read of those keys, visits exactly
//! the table's live rows, whatever the key template and whatever else lives in the
//! database. (The rows of a truncate whose sweep is under way are not visited: a sweep
//! runs right after its truncate is applied, and the re-check of a difference waits for
//! the sink to catch up.) Nothing here writes.
//!
//! A `value = "hash"` row reads back as text fields: [`RedisView::normalize`] turns a
//! source row into the same text (strings as they are, anything else as its JSON), as the
//! sink wrote it. A `mode = "invalidate"` sink keeps no rows, so there is nothing to
//! verify: [`RedisView::open`] says so.

use std::sync::Arc;

use cdc_schemas::TableId;
use serde_json::{Map, Value};

use super::apply::{field_text, push_rows_key};
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
    /// Per table, its rows sets (one per partition that has rows), as found by the first
    /// page of a scan.
    sets: Vec<(TableId, Vec<String>)>,
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
        Ok(RedisView {
            cfg,
            conn,
            sets: Vec::new(),
        })
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
            truncate_copies: 0,
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

    /// The names of `table`'s rows sets: partition 0's, then those of the other
    /// partitions that exist (a `SCAN` of the database for `<partition 0's name>#<n>`).
    async fn rows_sets(&mut self, table: &TableId) -> Result<Vec<String>, SinkError> {
        let mut base = String::new();
        push_rows_key(&mut base, &self.cfg.prefix, &table.schema, &table.name, 0);
        let mut pattern = String::new();
        for ch in base.chars() {
            if matches!(ch, '*' | '?' | '[' | ']' | '\\') {
                pattern.push('\\');
            }
            pattern.push(ch);
        }
        pattern.push_str("#*");
        let mut others: Vec<(u32, String)> = Vec::new();
        let mut cursor = b"0".to_vec();
        loop {
            let mut scan = Cmd::new("SCAN");
            scan.arg(&cursor)
                .arg(b"MATCH")
                .arg(pattern.as_bytes())
                .arg(b"COUNT")
                .arg_u64(1000)
                .arg(b"TYPE")
                .arg(b"set");
            let r = self.conn.call(scan).await.map_err(|e| self.io(e))?;
            let Reply::Array(Some(v)) = r else {
                return Err(unexpected(format!("{r:?}")));
            };
            let mut v = v.into_iter();
            let (Some(Reply::Bulk(Some(next))), Some(Reply::Array(Some(names)))) =
                (v.next(), v.next())
            else {
                return Err(unexpected("SCAN".into()));
            };
            for n in names {
                if let Reply::Bulk(Some(n)) = n {
                    let n = String::from_utf8_lossy(&n).into_owned();
                    if let Some(p) = n[base.len() + 1..].parse::<u32>().ok().filter(|&p| p > 0) {
                        others.push((p, n));
                    }
                }
            }
            if next == b"0" {
                break;
            }
            cursor = next;
        }
        others.sort();
        others.dedup();
        let mut out = vec![base];
        out.extend(others.into_iter().map(|(_, n)| n));
        Ok(out)
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
        // The cursor is `<index of the rows set>/<its SSCAN cursor>`.
        let (at, hcursor) = match cursor.as_deref().and_then(|c| c.split_once('/')) {
            Some((i, c)) => (i.parse::<usize>().unwrap_or(0), c.to_string()),
            None => (0, "0".to_string()),
        };
        let known = self.sets.iter().position(|(t, _)| t == table);
        let t = match known {
            Some(t) if !(at == 0 && hcursor == "0") => t,
            _ => {
                let found = self.rows_sets(table).await?;
                self.sets.retain(|(t, _)| t != table);
                self.sets.push((table.clone(), found));
                self.sets.len() - 1
            }
        };
        let count = self.sets[t].1.len();
        let Some(set) = self.sets[t].1.get(at).cloned() else {
            return Ok(ScanPage {
                rows: Vec::new(),
                next: None,
            });
        };
        let mut sscan = Cmd::new("SSCAN");
        sscan
            .arg(set.as_bytes())
            .arg(hcursor.as_bytes())
            .arg(b"COUNT")
            .arg_u64(max.max(1) as u64);
        let r = self.conn.call(sscan).await.map_err(|e| self.io(e))?;
        let (next, items) = match r {
            Reply::Array(Some(v)) if v.len() == 2 => {
                let mut v = v.into_iter();
                match (v.next(), v.next()) {
                    (Some(Reply::Bulk(Some(n))), Some(Reply::Array(Some(items)))) => (n, items),
                    other => return Err(unexpected(format!("{other:?}"))),
                }
            }
            Reply::Error(e) if e.starts_with("WRONGTYPE") => {
                return Err(SinkError::definite(
                    WHAT,
                    format!("{set} is not the sink's rows set ({e})"),
                    "check the sink's prefix; another application uses its keys",
                ))
            }
            other => return Err(unexpected(format!("{other:?}"))),
        };
        let names: Vec<String> = items
            .iter()
            .filter_map(|m| {
                m.as_bytes()
                    .map(|b| String::from_utf8_lossy(b).into_owned())
            })
            .collect();
        // Expired rows (ttl_ms) are members without a key.
        let rows = self.read(&names).await?;
        Ok(ScanPage {
            rows: names
                .into_iter()
                .zip(rows)
                .filter_map(|(id, row)| row.map(|r| (id, Some(r))))
                .collect(),
            next: if next != b"0" {
                Some(format!("{at}/{}", String::from_utf8_lossy(&next)))
            } else if at + 1 < count {
                Some(format!("{}/0", at + 1))
            } else {
                None
            },
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
