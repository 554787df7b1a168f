//! The `cdc` connector: configuration, CLI, preflight checks and (in later issues) the
//! pipeline and the admin HTTP server. The binary (`src/main.rs`) only calls [`cli::main`].

pub mod check;
pub mod cli;
pub mod config;
pub mod logging;
