//! The MySQL / MariaDB source. For now: its `[source]` keys ([`config`]), its preflight
//! checks ([`check`]) and the connection layer ([`conn`]) they share with the snapshot,
//! schema and binlog connections still to come (setup, snapshot, stream, decode, metrics).

pub mod check;
pub mod config;
pub mod conn;

pub use conn::{MySqlConnectError, MySqlEndpoint};
