//! The command line: `cdc run`, `cdc check`, `cdc log …` (see `log_cmd.rs`), `cdc verify`
//! (see `verify/`), `cdc --version`.
//!
//! Exit codes: 0 success; 1 a check failed or the connector stopped on a definite error;
//! 2 the command line or the configuration is invalid.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::Config;
use crate::logging::{self, LogFormat};

#[derive(Debug, Parser)]
#[command(
    name = "cdc",
    version,
    about = "Change data capture from Postgres and MySQL/MariaDB into a partitioned log"
)]
pub struct Cli {
    /// Log line format on stderr: auto = text on a terminal, JSON lines otherwise.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "auto",
        env = "CDC_LOG_FORMAT"
    )]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the connector: stream the source's changes into the log.
    Run {
        /// The configuration file (TOML).
        #[arg(long, short, env = "CDC_CONFIG")]
        config: PathBuf,
    },
    /// Run one `[[sink]]` of the configuration alone, against the embedded log that a
    /// `cdc run` (here or in another process) writes: it keeps its target equal to the
    /// tables, as a consumer group of the log, until SIGINT/SIGTERM.
    Sink {
        /// The configuration file (TOML): the same as the connector's.
        #[arg(long, short, env = "CDC_CONFIG")]
        config: PathBuf,
        /// The `name` of the `[[sink]]` section to run.
        #[arg(long)]
        sink: String,
        /// Serve `/healthz` and `/metrics` (the sink's lag and counters) here.
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
    },
    /// Where the connector stands: source position and the database's view of it (slot,
    /// retained WAL / binlog margin), lag, snapshot progress, topics, sinks, last errors.
    /// Asks the running connector on `[admin] listen`; without one, reads the log and the
    /// database.
    Status {
        /// The configuration file (TOML).
        #[arg(long, short, env = "CDC_CONFIG")]
        config: PathBuf,
        /// Print the document as JSON (the same as `GET /status`).
        #[arg(long)]
        json: bool,
    },
    /// Check that the source database is ready for change data capture.
    Check {
        /// The configuration file (TOML).
        #[arg(long, short, env = "CDC_CONFIG")]
        config: PathBuf,
        /// Print the report as JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Inspect and operate the embedded log: topics, describe, tail, produce, groups,
    /// reset-group. Reading commands work while `cdc run` holds the log.
    Log {
        #[command(flatten)]
        target: crate::log_cmd::LogTarget,
        #[command(subcommand)]
        command: crate::log_cmd::LogCommand,
    },
    /// Compare a source table with a view of it — the table rebuilt from the log
    /// (`--log`) or a sink's target (`--sink NAME`) — and print the keys that differ.
    /// Exit 0 equal, 1 different, 2 usage or configuration error.
    Verify(crate::verify::VerifyArgs),
    /// The embedded schema registry on its own: `cdc registry serve --data DIR --listen ADDR`.
    Registry {
        #[command(subcommand)]
        command: crate::registry_cmd::RegistryCommand,
    },
}

/// Entry point of the `cdc` binary.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    logging::init(cli.log_format);
    // `cdc log` is synchronous (the log's API blocks); it needs no runtime.
    let command = match cli.command {
        Command::Log { target, command } => return crate::log_cmd::run(target, command),
        other => other,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("cdc-worker")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(dispatch(command))
}

fn load_config(path: &std::path::Path) -> Result<Config, ExitCode> {
    Config::load(path).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    })
}

async fn dispatch(command: Command) -> ExitCode {
    match command {
        Command::Status { config, json } => {
            let config = match load_config(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            crate::status::cmd::run(config, json).await
        }
        Command::Check { config, json } => {
            let config = match load_config(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let report = cdc_sources::check(&config.source_spec()).await;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report.to_json()).unwrap_or_default()
                );
            } else {
                print!("{}", report.render_text());
            }
            if report.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Command::Run { config } => {
            let config = match load_config(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            tracing::info!(name = %config.name, source = config.source.kind().as_str(), url = %config.source.redacted_url(), "configuration loaded");
            crate::pipeline::run::run(config).await
        }
        Command::Sink {
            config,
            sink,
            listen,
        } => {
            let config = match load_config(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            crate::sink_run::standalone(config, &sink, listen).await
        }
        Command::Log { target, command } => crate::log_cmd::run(target, command),
        Command::Registry { command } => crate::registry_cmd::run(command).await,
        Command::Verify(args) => crate::verify::run(args).await,
    }
}
