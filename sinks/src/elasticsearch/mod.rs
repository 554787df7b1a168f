//! The Elasticsearch / OpenSearch sink (`type = "elasticsearch"`, alias `"opensearch"`):
//! each table is an index (`index` template), each row a document whose `_id` is the
//! row's key text, kept equal to the table through `_bulk` with external versions (the
//! change's version), so an older change never overwrites a newer one. `config` has its
//! keys, `client` the REST calls, `bulk` the NDJSON body and the per-item outcomes,
//! `deliver` what a change does (and the `gc_deletes` limit of the guarantee).
//!
//! Failures: no answer, 408/429/5xx are transient; per item, a 429 or 5xx retries that
//! item and the rest (what came before is reported delivered), a 409 is "already
//! applied", a mapping error is a rejected change (dead-lettered) and the rest goes on;
//! bad credentials or a mapping file the cluster refuses are definite.

pub mod bulk;
pub mod client;
pub mod config;
pub mod deliver;
pub mod view_read;

use cdc_schemas::config_keys::KeyError;
use cdc_schemas::metrics::Metrics;

use crate::change::Change;
use crate::config::SinkSpec;
use crate::search::plan::{self, Planner, Truncates};
use crate::{Delivered, Sink, SinkError};

/// Checks the Elasticsearch keys of `spec` (reading its files).
pub fn check(spec: &SinkSpec) -> Result<(), KeyError> {
    config::Settings::resolve(spec).map(|_| ())
}

/// Elasticsearch applies row changes only.
pub fn wants_tx_ends(_spec: &SinkSpec) -> bool {
    false
}

/// A running Elasticsearch / OpenSearch sink.
pub struct ElasticsearchSink {
    engine: deliver::Elasticsearch,
    planner: Planner,
}

impl ElasticsearchSink {
    /// Builds the sink; it talks to the cluster only when it delivers (an absent cluster
    /// is a transient failure there, not here).
    pub fn connect(spec: &SinkSpec, _metrics: &Metrics) -> Result<Self, SinkError> {
        let r = config::Settings::resolve(spec).map_err(|(k, m)| {
            SinkError::definite("sink configuration", format!("{k}: {m}"), "fix the key")
        })?;
        let client = client::Client::new(r.url, r.auth)?;
        Ok(ElasticsearchSink {
            engine: deliver::Elasticsearch::new(client, r.mappings),
            planner: Planner {
                names: r.names,
                batch_documents: r.batch_documents,
                truncates: Truncates::default(),
            },
        })
    }
}

impl Sink for ElasticsearchSink {
    async fn deliver(&mut self, changes: &[Change]) -> Result<Delivered, SinkError> {
        plan::deliver(&mut self.engine, &mut self.planner, changes).await
    }
}
