//! The MySQL / MariaDB source: its `[source]` keys ([`config`]), its preflight checks
//! ([`check`]), the connection layer ([`conn`]), its model of a captured table
//! ([`table`]) and the decoding of its values ([`decode`]); setup, snapshot, stream
//! and metrics follow the Postgres source's file set.

pub mod check;
pub mod config;
pub mod conn;
pub mod ddl;
pub mod decode;
pub mod history;
pub mod retention;
pub mod schema;
pub mod table;

pub use conn::{MySqlConnectError, MySqlEndpoint};
