//! Log output: `tracing` to stderr, as text or JSON lines.
//!
//! The filter comes from `CDC_LOG_LEVEL` (or `RUST_LOG`), default `info`. Text lines are
//! coloured only when stderr is a terminal and `NO_COLOR` is not set: a log file, a pipe
//! or a container's log collector gets plain text. No log line carries a row value or a
//! secret: configuration is logged only through its redacting `Debug` forms.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Output format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the global subscriber. Safe to call more than once (later calls do nothing).
pub fn init(format: LogFormat) {
    let filter = std::env::var("CDC_LOG_LEVEL")
        .ok()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| "info".to_string());
    let filter = EnvFilter::try_new(&filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
