//! The failure every source and sink reports: transient (retry with backoff, nothing
//! lost) or definite (stop and tell the operator what to do), as Materialize separates
//! them. Sources call it `SourceError`, sinks `SinkError`; the supervisor treats both
//! alike. Valid data in the database is never a reason for a definite failure.

/// The underlying error a [`Failure`] keeps, for `source()` chains and logs.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A failure, classified for the supervisor. It keeps its underlying error (a driver
/// error, an I/O error) as its `source()`, so logs show the whole chain and callers can
/// inspect it (a SQLSTATE, an errno) instead of parsing text.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// May succeed on retry (connection reset, server restarting, failover).
    #[error("{what} (will retry): {detail}")]
    Transient {
        what: String,
        detail: String,
        #[source]
        cause: Option<BoxError>,
    },
    /// Will not go away by retrying; the operator must act as `fix` says.
    #[error("{what}: {detail}. Fix: {fix}")]
    Definite {
        what: String,
        detail: String,
        fix: String,
        #[source]
        cause: Option<BoxError>,
    },
}

impl Failure {
    pub fn is_transient(&self) -> bool {
        matches!(self, Failure::Transient { .. })
    }

    pub fn transient(what: impl Into<String>, detail: impl Into<String>) -> Self {
        Failure::Transient {
            what: what.into(),
            detail: detail.into(),
            cause: None,
        }
    }

    pub fn definite(
        what: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Failure::Definite {
            what: what.into(),
            detail: detail.into(),
            fix: fix.into(),
            cause: None,
        }
    }

    /// Keeps `e` as the underlying error.
    pub fn caused_by(mut self, e: impl Into<BoxError>) -> Self {
        match &mut self {
            Failure::Transient { cause, .. } | Failure::Definite { cause, .. } => {
                *cause = Some(e.into())
            }
        }
        self
    }
}
