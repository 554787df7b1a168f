//! The schema history store: a source-agnostic, durable list of opaque records in append
//! order, which a source uses to know each table's schema *as it was* at the position it
//! resumes from (MySQL / MariaDB: [`crate::mysql::history`]). The pipeline provides it in
//! [`crate::SourceContext::history`] (over the embedded log: `cdc_connector::history`).
//!
//! Invariants a store keeps:
//! - [`SchemaHistoryStore::append`] returns `Ok` only once the record is durable (fsynced):
//!   a source that appended a record before emitting a checkpoint at or after it may rely
//!   on the record being there whenever that checkpoint is.
//! - [`SchemaHistoryStore::load`] returns every durable record, in append order, and only
//!   those; records are never deleted (no retention, no compaction) and never reordered.
//! - A failed `append` may still become durable later (with a later append): readers of the
//!   history must tolerate a record present twice.

use cdc_schemas::failure::Failure;

/// Why the schema history could not be read or written, classified as [`Failure`] is.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// May succeed on retry (the disk is full, an I/O error that is not corruption).
    #[error("schema history: {detail} (will retry)")]
    Transient {
        detail: String,
        #[source]
        cause: Option<cdc_schemas::failure::BoxError>,
    },
    /// Will not go away by retrying (corrupt records, a store configured to lose records).
    #[error("schema history: {detail}. Fix: {fix}")]
    Definite {
        detail: String,
        fix: String,
        #[source]
        cause: Option<cdc_schemas::failure::BoxError>,
    },
}

impl HistoryError {
    pub fn transient(detail: impl Into<String>) -> Self {
        HistoryError::Transient {
            detail: detail.into(),
            cause: None,
        }
    }

    pub fn definite(detail: impl Into<String>, fix: impl Into<String>) -> Self {
        HistoryError::Definite {
            detail: detail.into(),
            fix: fix.into(),
            cause: None,
        }
    }

    /// Keeps `e` as the underlying error.
    pub fn caused_by(mut self, e: impl Into<cdc_schemas::failure::BoxError>) -> Self {
        match &mut self {
            HistoryError::Transient { cause, .. } | HistoryError::Definite { cause, .. } => {
                *cause = Some(e.into())
            }
        }
        self
    }

    pub fn is_transient(&self) -> bool {
        matches!(self, HistoryError::Transient { .. })
    }
}

impl From<HistoryError> for Failure {
    fn from(e: HistoryError) -> Failure {
        match e {
            HistoryError::Transient { detail, cause } => Failure::Transient {
                what: "schema history".into(),
                detail,
                cause,
            },
            HistoryError::Definite { detail, fix, cause } => Failure::Definite {
                what: "schema history".into(),
                detail,
                fix,
                cause,
            },
        }
    }
}

/// A durable, append-only list of opaque records (see the module docs). Blocking: both
/// calls do file I/O (`append` an fsync); call them from a blocking context or accept a
/// short stall (a source appends only at a snapshot's start and on DDL).
pub trait SchemaHistoryStore: Send + Sync {
    /// Every durable record, oldest first.
    fn load(&self) -> Result<Vec<Vec<u8>>, HistoryError>;
    /// Appends `record`; returns once it is durable.
    fn append(&self, record: &[u8]) -> Result<(), HistoryError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_survives_into_failure() {
        let t: Failure = HistoryError::transient("disk full").into();
        assert!(t.is_transient());
        let d: Failure = HistoryError::definite("record 3 is not JSON", "restore the log").into();
        assert!(!d.is_transient());
        assert!(d.to_string().contains("restore the log"), "{d}");
    }
}
