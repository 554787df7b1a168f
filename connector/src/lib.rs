//! The `cdc` connector: configuration, CLI, preflight checks and (in later issues) the
//! pipeline and the admin HTTP server. The binary (`src/main.rs`) only calls [`cli::main`].

pub mod admin;
pub mod check;
pub mod cli;
pub mod config;
pub mod log_cmd;
pub mod logging;
pub mod pipeline;
pub mod registry_cmd;
