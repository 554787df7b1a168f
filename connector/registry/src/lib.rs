//! # cdc-registry: schema registry implementations
//!
//! Implementations of [`cdc_schemas::registry::SchemaRegistry`]:
//!
//! - [`EmbeddedRegistry`]: subjects, versions, global ids and compatibility levels stored
//!   durably in the embedded log (compacted topic `_schemas`, format in [`store`]),
//!   rebuilt in memory on open. The default when no `[registry] url` is configured.
//! - [`http::router`]: Confluent Schema Registry's REST API over an [`EmbeddedRegistry`],
//!   so any Confluent client (Java, Python, Go, …) can use it.
//! - [`remote::RemoteRegistry`]: a client for any Confluent-compatible registry.

pub mod canon;
pub mod embedded;
pub mod http;
pub mod remote;
pub mod store;

pub use embedded::{EmbeddedOptions, EmbeddedRegistry};

#[cfg(test)]
mod tests;
