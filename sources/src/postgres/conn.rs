//! Connecting to Postgres for ordinary queries: URL parsing, TLS modes, and errors that
//! say what failed and how to fix it.
//!
//! The URL is libpq's URI form: `postgres://user:pass@host:port/db?sslmode=…&sslrootcert=…`.
//! `sslmode` takes libpq's values, including `verify-ca` and `verify-full` (which
//! tokio-postgres' own parser does not accept, so we parse the URL ourselves). A password
//! given separately (config `source.password`) wins over the URL's.

use std::path::PathBuf;
use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

use crate::dburl;
use crate::secret::Secret;
use crate::tls::{client_config, TlsMode};

/// Where and how to connect.
#[derive(Clone, Debug)]
pub struct PgEndpoint {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Option<Secret>,
    pub dbname: String,
    pub tls: TlsMode,
    pub root_cert: Option<PathBuf>,
    pub application_name: String,
    pub connect_timeout: Duration,
    /// The URL with its password masked, for messages.
    pub redacted: String,
}

/// Why a connection failed; `fix` says what the operator can do.
#[derive(Debug, thiserror::Error)]
#[error("{message}. Fix: {fix}")]
pub struct PgConnectError {
    pub kind: PgConnectErrorKind,
    pub message: String,
    pub fix: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgConnectErrorKind {
    /// The URL or options are malformed.
    Config,
    /// Nothing answered, or the connection broke: may succeed on retry.
    Unreachable,
    /// The server refused our credentials or has no pg_hba entry for us.
    Auth,
    /// TLS negotiation or certificate verification failed.
    Tls,
    /// The database does not exist.
    NoDatabase,
    Other,
}

impl PgConnectError {
    pub fn is_transient(&self) -> bool {
        self.kind == PgConnectErrorKind::Unreachable
    }

    fn config(message: String, fix: &str) -> Self {
        PgConnectError {
            kind: PgConnectErrorKind::Config,
            message,
            fix: fix.to_string(),
        }
    }
}

impl PgEndpoint {
    /// Parses a `postgres://` URL; `password` (when given) replaces the URL's password.
    pub fn from_url(url: &str, password: Option<&Secret>) -> Result<Self, PgConnectError> {
        let config = |p: dburl::UrlProblem| PgConnectError::config(p.message, &p.fix);
        let u = dburl::parse(
            url,
            &["postgres", "postgresql"],
            "postgres://user:password@host:5432/dbname",
        )
        .map_err(config)?;
        let mut ep = PgEndpoint {
            host: u.host,
            port: u.port.unwrap_or(5432),
            user: u.user,
            password: u.password,
            dbname: u.database,
            tls: TlsMode::Prefer,
            root_cert: None,
            application_name: "cdc".into(),
            connect_timeout: Duration::from_secs(10),
            redacted: u.redacted,
        };
        for (k, v) in u.params {
            match k.as_str() {
                "sslmode" => ep.tls = dburl::tls_mode(&v, "disable, prefer, require, verify-ca, verify-full").map_err(config)?,
                "sslrootcert" => ep.root_cert = Some(PathBuf::from(v)),
                "application_name" => ep.application_name = v,
                "connect_timeout" => ep.connect_timeout = dburl::timeout_secs(&v).map_err(config)?,
                "host" => ep.host = v,
                "port" => {
                    ep.port = v.parse().map_err(|_| {
                        PgConnectError::config(format!("source.url: port={v} is not a port number"), "write port=5432")
                    })?
                }
                "user" => ep.user = v,
                "dbname" => ep.dbname = v,
                other => {
                    return Err(config(dburl::unknown(
                        other,
                        "sslmode, sslrootcert, application_name, connect_timeout, host, port, user, dbname",
                    )))
                }
            }
        }
        if let Some(p) = password {
            ep.password = Some(p.clone());
        }
        if ep.user.is_empty() {
            return Err(PgConnectError::config(
                format!("source.url {} names no user", ep.redacted),
                "write the user into the URL: postgres://USER@host/db",
            ));
        }
        if ep.dbname.is_empty() {
            return Err(PgConnectError::config(
                format!("source.url {} names no database", ep.redacted),
                "write the database into the URL: postgres://user@host/DBNAME",
            ));
        }
        Ok(ep)
    }

    /// `host:port` (or the socket directory and port).
    pub fn address(&self) -> String {
        if self.host.starts_with('/') {
            format!("{}/.s.PGSQL.{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    fn config(&self) -> tokio_postgres::Config {
        let mut c = tokio_postgres::Config::new();
        c.host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.dbname)
            .application_name(&self.application_name)
            .connect_timeout(self.connect_timeout)
            .ssl_mode(match self.tls {
                TlsMode::Disable => tokio_postgres::config::SslMode::Disable,
                TlsMode::Prefer => tokio_postgres::config::SslMode::Prefer,
                _ => tokio_postgres::config::SslMode::Require,
            });
        if let Some(p) = &self.password {
            c.password(p.expose());
        }
        c
    }

    /// Connects and spawns the connection's task (named by `task_name` in logs).
    pub async fn connect(&self) -> Result<Client, PgConnectError> {
        let config = self.config();
        let result = if self.tls == TlsMode::Disable || self.host.starts_with('/') {
            let (client, conn) = config.connect(NoTls).await.map_err(|e| self.classify(e))?;
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "postgres connection closed");
                }
            });
            client
        } else {
            let tls =
                client_config(self.tls, self.root_cert.as_deref()).map_err(|e| PgConnectError {
                    kind: PgConnectErrorKind::Tls,
                    message: e.to_string(),
                    fix: "see above".into(),
                })?;
            let (client, conn) = config
                .connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls))
                .await
                .map_err(|e| self.classify(e))?;
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "postgres connection closed");
                }
            });
            client
        };
        Ok(result)
    }

    /// Turns a driver error into one that names the problem and the fix.
    pub fn classify(&self, e: tokio_postgres::Error) -> PgConnectError {
        let addr = self.address();
        if let Some(db) = e.as_db_error() {
            let code = db.code();
            let (kind, fix) = if *code == SqlState::INVALID_PASSWORD {
                (
                    PgConnectErrorKind::Auth,
                    format!(
                        "check the password of role {:?} (source.password, or CDC_SOURCE__PASSWORD); to set it: ALTER ROLE \"{}\" PASSWORD '...'",
                        self.user, self.user
                    ),
                )
            } else if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION {
                (
                    PgConnectErrorKind::Auth,
                    format!(
                        "add a pg_hba.conf line that lets role {:?} connect to database {:?} from this host (e.g. 'host {} {} <client-ip>/32 scram-sha-256'), then SELECT pg_reload_conf()",
                        self.user, self.dbname, self.dbname, self.user
                    ),
                )
            } else if *code == SqlState::INVALID_CATALOG_NAME {
                (
                    PgConnectErrorKind::NoDatabase,
                    format!("create the database (CREATE DATABASE \"{}\") or fix the database name in source.url", self.dbname),
                )
            } else if *code == SqlState::TOO_MANY_CONNECTIONS
                || *code == SqlState::CANNOT_CONNECT_NOW
            {
                (
                    PgConnectErrorKind::Unreachable,
                    "wait for the server to accept connections, or raise max_connections"
                        .to_string(),
                )
            } else {
                (
                    PgConnectErrorKind::Other,
                    "see the server's message".to_string(),
                )
            };
            return PgConnectError {
                kind,
                message: format!(
                    "Postgres at {addr} refused the connection as {:?}: {} ({})",
                    self.user,
                    db.message(),
                    code.code()
                ),
                fix,
            };
        }
        let text = error_chain(&e);
        let lower = text.to_ascii_lowercase();
        if lower.contains("password missing") || lower.contains("no password") {
            return PgConnectError {
                kind: PgConnectErrorKind::Auth,
                message: format!(
                    "Postgres at {addr} asks for a password for {:?} and none is configured",
                    self.user
                ),
                fix:
                    "put the password into source.url or source.password (env CDC_SOURCE__PASSWORD)"
                        .into(),
            };
        }
        if lower.contains("tls")
            || lower.contains("certificate")
            || lower.contains("ssl")
            || lower.contains("handshake")
        {
            let fix = match self.tls {
                TlsMode::VerifyCa | TlsMode::VerifyFull => {
                    "make sslrootcert point at the CA that signed the server certificate (and for verify-full, connect by a host name the certificate names), or lower sslmode"
                }
                _ => "enable TLS on the server (ssl = on with ssl_cert_file/ssl_key_file) or use sslmode=prefer/disable",
            };
            return PgConnectError {
                kind: PgConnectErrorKind::Tls,
                message: format!(
                    "TLS with Postgres at {addr} failed (sslmode={}): {text}",
                    self.tls.as_str()
                ),
                fix: fix.into(),
            };
        }
        PgConnectError {
            kind: PgConnectErrorKind::Unreachable,
            message: format!("cannot reach Postgres at {addr}: {text}"),
            fix: "check the host and port in source.url, that Postgres is running, and that listen_addresses and any firewall let this host in".into(),
        }
    }
}

/// A failed catalog or snapshot query as a [`crate::SourceError`] that keeps the driver's
/// error: transient when the connection broke or the server is shutting down, restarting
/// or out of connection slots (SQLSTATE classes 08 and 57P, and 53300), definite
/// otherwise, with `fix`.
pub fn source_error(what: &str, e: tokio_postgres::Error, fix: &str) -> crate::SourceError {
    let code = e.as_db_error().map(|d| d.code().code());
    let transient = e.is_closed()
        || code
            .map(|c| c.starts_with("08") || c.starts_with("57P") || c == "53300")
            .unwrap_or(true);
    let detail = error_chain(&e);
    let err = if transient {
        crate::SourceError::transient(what, detail)
    } else {
        crate::SourceError::definite(what, detail, fix)
    };
    err.caused_by(e)
}

/// The error and its sources in one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_libpq_uri() {
        let ep = PgEndpoint::from_url(
            "postgres://cdc:p%40ss@db.example:6543/app?sslmode=verify-full&sslrootcert=/ca.pem",
            None,
        )
        .unwrap();
        assert_eq!(
            (
                ep.host.as_str(),
                ep.port,
                ep.user.as_str(),
                ep.dbname.as_str()
            ),
            ("db.example", 6543, "cdc", "app")
        );
        assert_eq!(ep.password.as_ref().unwrap().expose(), "p@ss");
        assert_eq!(ep.tls, TlsMode::VerifyFull);
        assert!(!format!("{ep:?}").contains("p@ss"));
        assert!(!ep.redacted.contains("p%40ss"));
    }

    #[test]
    fn password_override_wins() {
        let ep =
            PgEndpoint::from_url("postgres://cdc:old@h/db", Some(&Secret::new("new"))).unwrap();
        assert_eq!(ep.password.unwrap().expose(), "new");
    }

    #[test]
    fn bad_urls_say_what_to_write() {
        for (url, needle) in [
            ("mysql://u@h/db", "expected postgres://"),
            ("postgres://u@h/db?sslmode=maybe", "sslmode=maybe"),
            ("postgres://u@h/", "names no database"),
            ("postgres://h/db", "names no user"),
            ("postgres://u@h/db?frobnicate=1", "frobnicate"),
        ] {
            let e = PgEndpoint::from_url(url, None).unwrap_err();
            assert!(e.to_string().contains(needle), "{url}: {e}");
            assert_eq!(e.kind, PgConnectErrorKind::Config);
        }
    }
}
