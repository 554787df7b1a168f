//! The `cdc` connector: configuration, CLI, the pipeline and its supervisor, the admin
//! HTTP server, and the sinks that read the log (`sink_run`). It names no database: sources come from `cdc_sources::build`, their
//! preflight checks from `cdc_sources::check`. The binary (`src/main.rs`) only calls [`cli::main`].

pub mod admin;
pub mod cli;
pub mod config;
pub mod history;
pub mod kafka_consumer;
pub mod log_cmd;
pub mod log_consumer;
pub mod log_repair;
pub mod logging;
pub mod pipeline;
pub mod registry_cmd;
pub mod sink_run;
pub mod status;
pub mod verify;
