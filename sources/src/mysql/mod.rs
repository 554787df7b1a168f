//! The MySQL / MariaDB source: its `[source]` keys ([`config`]), its preflight checks
//! ([`check`]), the connection layer ([`conn`]), its model of a captured table
//! ([`table`]), table schemas and how DDL evolves them ([`schema`], [`ddl`]), the
//! decoding of its values ([`decode`]), the binlog connection and
//! MariaDB's own events ([`binlog`]), the snapshot ([`snapshot`]), the binlog stream
//! ([`stream`]), its gauges ([`metrics`]) and [`source`], which ties them into the
//! [`crate::Source`] the factory builds.

pub mod binlog;
pub mod check;
pub mod config;
pub mod conn;
pub mod ddl;
pub mod decode;
pub mod history;
pub mod metrics;
pub mod retention;
pub mod schema;
pub mod snapshot;
pub mod source;
pub mod stream;
pub mod table;
pub mod verify;

pub use config::{MySqlSettings, MySqlSourceConfig};
pub use conn::{MySqlConnectError, MySqlEndpoint};
pub use source::MySqlSource;
