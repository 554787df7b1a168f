//! `cdc registry serve`: the embedded schema registry on its own — a small
//! Confluent-compatible registry for teams that have none, and for tests.
//!
//! ```text
//! cdc registry serve --data /var/lib/cdc-registry --listen 127.0.0.1:8081 \
//!     [--compatibility BACKWARD] [--basic-auth-file /etc/cdc/registry-users]
//! ```
//!
//! Opens (creating it if needed) an embedded log at `--data` holding the `_schemas` topic,
//! serves the registry API at `/` and `/registry/` plus `/healthz`, `/readyz`, `/metrics`,
//! and stops gracefully on SIGTERM or Ctrl-C (in-flight requests are answered; every
//! registration was already fsynced before its answer). Prints
//! `listening on http://ADDR` on stdout once it accepts connections (with `--listen
//! 127.0.0.1:0`, ADDR has the chosen port).
//!
//! `--basic-auth-file` (or `CDC_REGISTRY_BASIC_AUTH_FILE`): `user:password` lines; the
//! registry API then requires one of them (HTTP basic auth); probes and metrics do not.
//!
//! Exit codes: 0 stopped by a signal, 1 could not open the data or listen, 2 bad
//! command line.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use cdc_log::{Log, LogOptions};
use cdc_registry::{EmbeddedOptions, EmbeddedRegistry};
use cdc_schemas::compat::CompatibilityLevel;
use clap::Subcommand;

use crate::admin::{self, AdminOptions, BasicAuth};

#[derive(Debug, Subcommand)]
pub enum RegistryCommand {
    /// Serve the embedded schema registry (Confluent REST API) on its own.
    Serve {
        /// Data directory (an embedded log holding the `_schemas` topic).
        #[arg(long, value_name = "DIR", env = "CDC_REGISTRY_DATA")]
        data: PathBuf,
        /// Address to listen on.
        #[arg(
            long,
            value_name = "ADDR",
            default_value = "127.0.0.1:8081",
            env = "CDC_REGISTRY_LISTEN"
        )]
        listen: SocketAddr,
        /// Default compatibility level of subjects without their own (until `PUT /config`).
        #[arg(long, default_value = "BACKWARD", value_parser = parse_level)]
        compatibility: CompatibilityLevel,
        /// Require HTTP basic auth on the API: a file of `user:password` lines.
        #[arg(long, value_name = "FILE", env = "CDC_REGISTRY_BASIC_AUTH_FILE")]
        basic_auth_file: Option<PathBuf>,
    },
}

fn parse_level(s: &str) -> Result<CompatibilityLevel, String> {
    s.parse()
        .map_err(|e: cdc_schemas::compat::ParseLevelError| e.to_string())
}

/// Runs a `cdc registry` command (inside the tokio runtime).
pub async fn run(command: RegistryCommand) -> ExitCode {
    match command {
        RegistryCommand::Serve {
            data,
            listen,
            compatibility,
            basic_auth_file,
        } => serve(data, listen, compatibility, basic_auth_file).await,
    }
}

async fn serve(
    data: PathBuf,
    listen: SocketAddr,
    compatibility: CompatibilityLevel,
    basic_auth_file: Option<PathBuf>,
) -> ExitCode {
    let auth = match basic_auth_file {
        None => None,
        Some(path) => match std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| BasicAuth::from_lines(&t))
        {
            Ok(a) => Some(a),
            Err(e) => {
                eprintln!("error: --basic-auth-file {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
    };
    let opened = tokio::task::spawn_blocking(move || {
        let log = Log::open(&data, LogOptions::default())
            .map_err(|e| format!("cannot open the registry data {}: {e}", data.display()))?;
        let registry = EmbeddedRegistry::open_with(
            log.clone(),
            EmbeddedOptions {
                default_compatibility: compatibility,
            },
        )
        .map_err(|e| format!("cannot load the registry from {}: {e}", data.display()))?;
        Ok::<_, String>((log, registry))
    })
    .await;
    let (log, registry) = match opened {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let options = AdminOptions::new(listen)
        .registry(registry)
        .log(&log)
        .basic_auth(auth);
    let server = match admin::serve(options, shutdown_signal()).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    println!("listening on http://{}", server.local_addr);
    let _ = std::io::stdout().flush();
    let result = server.join.await;
    // Every write was flushed before it was answered; this flush only makes sure nothing
    // else is pending (there is nothing else).
    let _ = log.flush(None);
    match result {
        Ok(Ok(())) => {
            tracing::info!("schema registry stopped");
            ExitCode::SUCCESS
        }
        Ok(Err(e)) => {
            eprintln!("error: the registry server failed: {e}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: the registry server task failed: {e}");
            ExitCode::from(1)
        }
    }
}

/// Completes on SIGTERM or Ctrl-C (SIGINT).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("Ctrl-C: stopping"),
        _ = term => tracing::info!("SIGTERM: stopping"),
    }
}
