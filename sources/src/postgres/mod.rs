//! The Postgres source. For now: the connection layer shared by preflight checks and
//! (in the source issue) the snapshot and catalog queries.

pub mod conn;

pub use conn::{PgConnectError, PgEndpoint};
