//! The MySQL / MariaDB source. For now: the connection layer shared by preflight checks
//! and (in the MySQL source issue) the snapshot, schema and binlog connections.

pub mod conn;

pub use conn::{MySqlConnectError, MySqlEndpoint};
