//! The view of `cdc verify --sink NAME`: the sink's target, read back through its
//! [`ViewReader`] (`sinks/src/view_read.rs`), and the sink's consumer group, whose
//! committed offsets say how far the target has applied the log.
//!
//! Invariants: nothing here writes to the target; the rows the source lacks are found
//! by id (the view's name of a row), so only an 8-byte hash per source row is kept — in
//! memory while it fits `--memory-mb`, else in sorted runs on disk ([`super::seen`]).

use std::hash::{Hash, Hasher};

use cdc_schemas::TableId;
use cdc_sinks::view_read::{AnyView, ViewReader, ViewRow};
use cdc_sinks::SinkSpec;
use serde_json::Map;

use super::compare::{Difference, Differences, JsonRow};
use super::seen::SeenIds;
use super::VerifyError;

fn sink_err(e: cdc_schemas::failure::Failure) -> VerifyError {
    VerifyError::Failed(e.to_string())
}

/// A sink's target, for one table.
pub struct SinkView {
    view: AnyView,
    table: TableId,
    /// The sink's consumer group.
    pub group: String,
    /// The record key's columns: a row of the view that has them all gives its key.
    key_columns: Vec<String>,
}

impl SinkView {
    pub async fn open(
        spec: &SinkSpec,
        table: &TableId,
        key_columns: Vec<String>,
    ) -> Result<SinkView, VerifyError> {
        let view = cdc_sinks::view_read::open(spec).await.map_err(|e| {
            if e.is_transient() {
                VerifyError::Failed(e.to_string())
            } else {
                VerifyError::Usage(e.to_string())
            }
        })?;
        Ok(SinkView {
            view,
            table: table.clone(),
            group: spec.group(),
            key_columns,
        })
    }

    pub async fn get(&mut self, keys: &[JsonRow]) -> Result<Vec<Option<ViewRow>>, VerifyError> {
        self.view.get(&self.table, keys).await.map_err(sink_err)
    }

    pub async fn count(&mut self) -> Result<u64, VerifyError> {
        self.view.count(&self.table).await.map_err(sink_err)
    }

    /// A source row in the form the view holds it.
    pub fn normalize(&self, key: &JsonRow, row: JsonRow) -> JsonRow {
        self.view.normalize(key, row)
    }

    /// The hash of the view's id of `key`'s row.
    pub fn id_hash(&self, key: &JsonRow) -> u64 {
        id_hash(&self.view.id_of(&self.table, key))
    }

    /// Scans the target for rows whose id is not in `seen` (the ids of the source's rows)
    /// and adds them to `diffs` as rows the source lacks, in scan order. Spilled, the
    /// scan goes to disk and is merged with the ids there; the rows added are the same.
    pub async fn extras(
        &mut self,
        seen: &mut SeenIds,
        diffs: &mut Differences,
    ) -> Result<(), VerifyError> {
        let mut cursor = None;
        loop {
            let page = self
                .view
                .scan(&self.table, cursor, 1000)
                .await
                .map_err(sink_err)?;
            for (id, row) in page.rows {
                let h = id_hash(&id);
                if seen.spilled() {
                    seen.scan_row(h, &id, &row)?;
                } else if !seen.contains(h) {
                    diffs.push(self.missing_in_source(id, row));
                }
            }
            match page.next {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        if seen.spilled() {
            // As many as the in-memory scan would keep; the rest only counted.
            let room = diffs.cap().saturating_sub(diffs.kept.len());
            let found = seen.extras(room)?;
            diffs.more += found.dropped();
            for at in found.into_sorted() {
                let (id, row) = seen.row_at(at)?;
                diffs.push(self.missing_in_source(id, row));
            }
        }
        Ok(())
    }

    fn missing_in_source(&self, id: String, row: Option<ViewRow>) -> Difference {
        Difference {
            key: row.as_ref().and_then(|r| self.key_of(r)),
            id,
            source: None,
            view: row,
            note: None,
        }
    }

    /// The record key of a view row that keeps every key column under its own name.
    fn key_of(&self, row: &ViewRow) -> Option<JsonRow> {
        let mut key = Map::new();
        for c in &self.key_columns {
            key.insert(c.clone(), row.get(c).cloned().filter(|v| !v.is_null())?);
        }
        Some(key)
    }
}

fn id_hash(id: &str) -> u64 {
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new();
    id.hash(&mut h);
    h.finish()
}
