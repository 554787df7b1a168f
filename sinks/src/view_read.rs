//! Reading a sink's view back, for `cdc verify --sink NAME`: each target that can be
//! verified implements [`ViewReader`] (in its own folder, `<target>/view_read.rs`), and
//! [`open`] builds the one a `[[sink]]` section names.
//!
//! Invariants: a row read back is the after-image as the sink was handed it (after the
//! sink's column selection and renames, [`crate::view::ColumnMap`]), as JSON values, so it
//! compares equal to the [`Change::after`](crate::Change::after) that wrote it; reading
//! never writes to the target.

use std::future::Future;

use cdc_schemas::TableId;
use serde_json::{Map, Value};

use crate::config::{SinkKind, SinkSpec};
use crate::SinkError;

/// A row as the view holds it: column → value.
pub type ViewRow = Map<String, Value>;

/// One page of a [`ViewReader::scan`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScanPage {
    /// The view's id of each row ([`ViewReader::id_of`]) and, where the target returns
    /// it with the scan, the row.
    pub rows: Vec<(String, Option<ViewRow>)>,
    /// Where the next page starts; `None`: this was the last.
    pub next: Option<String>,
}

/// What `cdc verify` needs of a sink's target.
pub trait ViewReader: Send {
    /// The rows of `table` with these record keys (the key's fields, in key order), in
    /// the order of `keys`; `None` where the view has no row.
    fn get(
        &mut self,
        table: &TableId,
        keys: &[Map<String, Value>],
    ) -> impl Future<Output = Result<Vec<Option<ViewRow>>, SinkError>> + Send;

    /// How many rows of `table` the view holds.
    fn count(&mut self, table: &TableId) -> impl Future<Output = Result<u64, SinkError>> + Send;

    /// About `max` rows of `table` from `cursor` on (`None`: the start), in no particular
    /// order; every row present for the whole scan is returned once.
    fn scan(
        &mut self,
        table: &TableId,
        cursor: Option<String>,
        max: usize,
    ) -> impl Future<Output = Result<ScanPage, SinkError>> + Send;

    /// The id under which the view holds the row of `key` (what [`ScanPage::rows`] names).
    fn id_of(&self, table: &TableId, key: &Map<String, Value>) -> String;

    /// A source row (of record key `key`) as this view can hold it, for targets that
    /// store values in another form than JSON (a Redis hash holds text, a Typesense
    /// document's `id` is the key text): `verify` compares `normalize(key, source row)`
    /// with the row read back. Identity by default.
    fn normalize(&self, key: &Map<String, Value>, row: ViewRow) -> ViewRow {
        let _ = key;
        row
    }
}

/// The view of any target this build can read back.
pub enum AnyView {
    Redis(crate::redis::view_read::RedisView),
    Typesense(crate::typesense::view_read::TypesenseView),
    Elasticsearch(crate::elasticsearch::view_read::ElasticsearchView),
}

impl ViewReader for AnyView {
    async fn get(
        &mut self,
        table: &TableId,
        keys: &[Map<String, Value>],
    ) -> Result<Vec<Option<ViewRow>>, SinkError> {
        match self {
            AnyView::Redis(v) => v.get(table, keys).await,
            AnyView::Typesense(v) => v.get(table, keys).await,
            AnyView::Elasticsearch(v) => v.get(table, keys).await,
        }
    }

    async fn count(&mut self, table: &TableId) -> Result<u64, SinkError> {
        match self {
            AnyView::Redis(v) => v.count(table).await,
            AnyView::Typesense(v) => v.count(table).await,
            AnyView::Elasticsearch(v) => v.count(table).await,
        }
    }

    async fn scan(
        &mut self,
        table: &TableId,
        cursor: Option<String>,
        max: usize,
    ) -> Result<ScanPage, SinkError> {
        match self {
            AnyView::Redis(v) => v.scan(table, cursor, max).await,
            AnyView::Typesense(v) => v.scan(table, cursor, max).await,
            AnyView::Elasticsearch(v) => v.scan(table, cursor, max).await,
        }
    }

    fn id_of(&self, table: &TableId, key: &Map<String, Value>) -> String {
        match self {
            AnyView::Redis(v) => v.id_of(table, key),
            AnyView::Typesense(v) => v.id_of(table, key),
            AnyView::Elasticsearch(v) => v.id_of(table, key),
        }
    }

    fn normalize(&self, key: &Map<String, Value>, row: ViewRow) -> ViewRow {
        match self {
            AnyView::Redis(v) => v.normalize(key, row),
            AnyView::Typesense(v) => v.normalize(key, row),
            AnyView::Elasticsearch(v) => v.normalize(key, row),
        }
    }
}

/// Connects to the target of `spec` to read its view.
pub async fn open(spec: &SinkSpec) -> Result<AnyView, SinkError> {
    match spec.common.kind {
        SinkKind::Redis => Ok(AnyView::Redis(
            crate::redis::view_read::RedisView::open(spec).await?,
        )),
        SinkKind::Typesense => Ok(AnyView::Typesense(
            crate::typesense::view_read::TypesenseView::open(spec)?,
        )),
        SinkKind::Elasticsearch => Ok(AnyView::Elasticsearch(
            crate::elasticsearch::view_read::ElasticsearchView::open(spec)?,
        )),
    }
}

/// The id targets that key a row by one string give it: the key's values joined by `:`
/// ([`crate::view::key_text`]).
pub fn key_id(key: &Map<String, Value>) -> String {
    let mut s = String::new();
    crate::view::key_text(key, &mut s);
    s
}
