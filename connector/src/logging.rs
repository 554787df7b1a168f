//! Log output: `tracing` to stderr, as text or JSON lines.
//!
//! The filter comes from `CDC_LOG_LEVEL` (or `RUST_LOG`), default `info`. The format is
//! `--log-format` / `CDC_LOG_FORMAT`: `auto` (the default) writes text to a terminal and
//! JSON lines (one object per event, its fields flattened) to anything else — a log file,
//! a pipe, a container's log collector; `text` and `json` force one. Text lines are
//! coloured only on a terminal and when `NO_COLOR` is not set. No log line carries a row value or a
//! secret: configuration is logged only through its redacting `Debug` forms.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Output format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Text on a terminal, JSON lines otherwise.
    Auto,
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
    let json = match format {
        LogFormat::Auto => !std::io::stderr().is_terminal(),
        LogFormat::Text => false,
        LogFormat::Json => true,
    };
    let _ = if json {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
}
