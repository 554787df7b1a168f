//! The Typesense sink (`type = "typesense"`): each table is a collection (`collection`
//! template), each row a document whose `id` is the row's key text, kept equal to the
//! table through the import API. `config` has its keys, `client` Typesense's HTTP API,
//! `deliver` what a change does (and the guarantee: Typesense has no conditional write,
//! so the sink relies on the log's per-key order; see there).
//!
//! Failures: no answer, 408/429/5xx are transient (the driver retries with backoff from
//! the same place); a document Typesense refuses (a value that does not fit its field)
//! is a rejected change (dead-lettered) and the rest goes on; bad credentials or a
//! schema file Typesense refuses are definite.

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

/// Checks the Typesense keys of `spec` (reading its files).
pub fn check(spec: &SinkSpec) -> Result<(), KeyError> {
    config::Settings::resolve(spec).map(|_| ())
}

/// Typesense applies row changes only.
pub fn wants_tx_ends(_spec: &SinkSpec) -> bool {
    false
}

/// A running Typesense sink.
pub struct TypesenseSink {
    engine: deliver::Typesense,
    planner: Planner,
}

impl TypesenseSink {
    /// Builds the sink; it talks to Typesense only when it delivers (an absent server is
    /// a transient failure there, not here).
    pub fn connect(spec: &SinkSpec, _metrics: &Metrics) -> Result<Self, SinkError> {
        let r = config::Settings::resolve(spec).map_err(|(k, m)| {
            SinkError::definite("sink configuration", format!("{k}: {m}"), "fix the key")
        })?;
        let client = client::Client::new(r.url, r.api_key)?;
        Ok(TypesenseSink {
            engine: deliver::Typesense::new(client, r.schemas),
            planner: Planner {
                names: r.names,
                batch_documents: r.batch_documents,
                truncates: Truncates::default(),
            },
        })
    }
}

impl Sink for TypesenseSink {
    async fn deliver(&mut self, changes: &[Change]) -> Result<Delivered, SinkError> {
        plan::deliver(&mut self.engine, &mut self.planner, changes).await
    }
}
