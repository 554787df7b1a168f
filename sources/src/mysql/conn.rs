//! Connecting to MySQL / MariaDB: URL parsing, TLS modes, and errors that say what failed
//! and how to fix it.
//!
//! URL: `mysql://user:pass@host:3306/db?sslmode=…&sslrootcert=…` (`mariadb://` too).
//! `sslmode` takes libpq's names or MySQL's `ssl-mode` names (`DISABLED`, `PREFERRED`,
//! `REQUIRED`, `VERIFY_CA`, `VERIFY_IDENTITY`). The default is `prefer`: TLS when the
//! server offers it, plain otherwise, as MySQL's own client does.

use std::path::PathBuf;
use std::time::Duration;

use mysql_async::{Conn, Error as MyError, OptsBuilder, SslOpts};

use crate::dburl;
use crate::secret::Secret;
use crate::tls::TlsMode;

/// Where and how to connect.
#[derive(Clone, Debug)]
pub struct MySqlEndpoint {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Option<Secret>,
    /// May be empty: the connector reads several databases.
    pub dbname: String,
    pub tls: TlsMode,
    pub root_cert: Option<PathBuf>,
    pub connect_timeout: Duration,
    pub redacted: String,
}

/// Why a connection failed; `fix` says what the operator can do.
#[derive(Debug, thiserror::Error)]
#[error("{message}. Fix: {fix}")]
pub struct MySqlConnectError {
    pub kind: MySqlConnectErrorKind,
    pub message: String,
    pub fix: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MySqlConnectErrorKind {
    Config,
    Unreachable,
    Auth,
    Tls,
    NoDatabase,
    Other,
}

impl MySqlConnectError {
    pub fn is_transient(&self) -> bool {
        self.kind == MySqlConnectErrorKind::Unreachable
    }

    fn config(message: String, fix: &str) -> Self {
        MySqlConnectError {
            kind: MySqlConnectErrorKind::Config,
            message,
            fix: fix.into(),
        }
    }
}

impl MySqlEndpoint {
    pub fn from_url(url: &str, password: Option<&Secret>) -> Result<Self, MySqlConnectError> {
        let config = |p: dburl::UrlProblem| MySqlConnectError::config(p.message, &p.fix);
        let u = dburl::parse(
            url,
            &["mysql", "mariadb"],
            "mysql://user:password@host:3306/dbname",
        )
        .map_err(config)?;
        let mut ep = MySqlEndpoint {
            host: u.host,
            port: u.port.unwrap_or(3306),
            user: u.user,
            password: u.password,
            dbname: u.database,
            tls: TlsMode::Prefer,
            root_cert: None,
            connect_timeout: Duration::from_secs(10),
            redacted: u.redacted,
        };
        for (k, v) in u.params {
            match k.as_str() {
                "sslmode" | "ssl-mode" | "ssl_mode" => {
                    ep.tls = dburl::tls_mode(
                        &v,
                        "disable, prefer, require, verify-ca, verify-full (or DISABLED, PREFERRED, REQUIRED, VERIFY_CA, VERIFY_IDENTITY)",
                    )
                    .map_err(config)?
                }
                "sslrootcert" | "ssl-ca" | "ssl_ca" => ep.root_cert = Some(PathBuf::from(v)),
                "connect_timeout" => ep.connect_timeout = dburl::timeout_secs(&v).map_err(config)?,
                other => return Err(config(dburl::unknown(other, "sslmode, sslrootcert, connect_timeout"))),
            }
        }
        if let Some(p) = password {
            ep.password = Some(p.clone());
        }
        if ep.user.is_empty() {
            return Err(MySqlConnectError::config(
                format!("source.url {} names no user", ep.redacted),
                "write the user into the URL: mysql://USER@host/db",
            ));
        }
        Ok(ep)
    }

    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    fn opts(&self, tls: Option<SslOpts>) -> OptsBuilder {
        OptsBuilder::default()
            .ip_or_hostname(self.host.clone())
            .tcp_port(self.port)
            .user(Some(self.user.clone()))
            .pass(self.password.as_ref().map(|p| p.expose().to_string()))
            .db_name((!self.dbname.is_empty()).then(|| self.dbname.clone()))
            .prefer_socket(false)
            .ssl_opts(tls)
    }

    fn ssl_opts(&self) -> SslOpts {
        let mut o = SslOpts::default();
        if let Some(ca) = &self.root_cert {
            o = o.with_root_certs(vec![ca.clone().into()]);
        }
        match self.tls {
            TlsMode::VerifyFull => o,
            TlsMode::VerifyCa => o.with_danger_skip_domain_validation(true),
            _ => o
                .with_danger_accept_invalid_certs(true)
                .with_danger_skip_domain_validation(true),
        }
    }

    /// Connects. With `prefer`, a server without TLS gets a plain connection.
    pub async fn connect(&self) -> Result<Conn, MySqlConnectError> {
        let attempt = |tls: Option<SslOpts>| {
            let opts = self.opts(tls);
            let timeout = self.connect_timeout;
            async move {
                match tokio::time::timeout(timeout, Conn::new(opts)).await {
                    Ok(r) => r.map_err(Some),
                    Err(_) => Err(None),
                }
            }
        };
        let first = match self.tls {
            TlsMode::Disable => attempt(None).await,
            _ => attempt(Some(self.ssl_opts())).await,
        };
        match first {
            Ok(c) => Ok(c),
            Err(Some(MyError::Driver(mysql_async::DriverError::NoClientSslFlagFromServer)))
                if self.tls == TlsMode::Prefer =>
            {
                attempt(None).await.map_err(|e| self.classify(e))
            }
            Err(e) => Err(self.classify(e)),
        }
    }

    /// Turns a driver error (or a timeout, `None`) into one that names the fix.
    pub fn classify(&self, e: Option<MyError>) -> MySqlConnectError {
        let addr = self.address();
        let Some(e) = e else {
            return MySqlConnectError {
                kind: MySqlConnectErrorKind::Unreachable,
                message: format!("cannot reach MySQL at {addr}: no answer within {:?}", self.connect_timeout),
                fix: "check the host and port in source.url, that the server is running, and that bind-address and any firewall let this host in".into(),
            };
        };
        match &e {
            MyError::Server(s) => {
                let (kind, fix) = match s.code {
                    1045 => (
                        MySqlConnectErrorKind::Auth,
                        format!(
                            "check the password of user {:?} (source.password, or CDC_SOURCE__PASSWORD); to set it: ALTER USER '{}'@'%' IDENTIFIED BY '...'",
                            self.user, self.user
                        ),
                    ),
                    1044 | 1049 => (
                        MySqlConnectErrorKind::NoDatabase,
                        format!("create database `{}` or fix the database name in source.url", self.dbname),
                    ),
                    1129 | 1130 => (
                        MySqlConnectErrorKind::Auth,
                        format!("create the user for this host: CREATE USER '{}'@'<client-host>' ...", self.user),
                    ),
                    1040 | 1203 => (MySqlConnectErrorKind::Unreachable, "wait, or raise max_connections".into()),
                    _ => (MySqlConnectErrorKind::Other, "see the server's message".into()),
                };
                MySqlConnectError {
                    kind,
                    message: format!(
                        "MySQL at {addr} refused the connection as {:?}: {} (error {})",
                        self.user, s.message, s.code
                    ),
                    fix,
                }
            }
            MyError::Driver(mysql_async::DriverError::NoClientSslFlagFromServer) => {
                MySqlConnectError {
                    kind: MySqlConnectErrorKind::Tls,
                    message: format!(
                        "MySQL at {addr} does not offer TLS but sslmode={} requires it",
                        self.tls.as_str()
                    ),
                    fix:
                        "enable TLS on the server (ssl_cert, ssl_key) or use sslmode=prefer/disable"
                            .into(),
                }
            }
            MyError::Io(io) => {
                let text = crate::postgres::conn::error_chain(io);
                let tls = text.to_ascii_lowercase();
                if tls.contains("tls") || tls.contains("certificate") || tls.contains("handshake") {
                    MySqlConnectError {
                        kind: MySqlConnectErrorKind::Tls,
                        message: format!("TLS with MySQL at {addr} failed (sslmode={}): {text}", self.tls.as_str()),
                        fix: "make sslrootcert point at the CA that signed the server certificate, or lower sslmode".into(),
                    }
                } else {
                    MySqlConnectError {
                        kind: MySqlConnectErrorKind::Unreachable,
                        message: format!("cannot reach MySQL at {addr}: {text}"),
                        fix: "check the host and port in source.url, that the server is running, and that bind-address and any firewall let this host in".into(),
                    }
                }
            }
            other => MySqlConnectError {
                kind: MySqlConnectErrorKind::Other,
                message: format!("connecting to MySQL at {addr} failed: {other}"),
                fix: "see the message".into(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_url() {
        let ep = MySqlEndpoint::from_url(
            "mysql://cdc:s%3Acret@127.0.0.1:3307/app?ssl-mode=VERIFY_IDENTITY",
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
            ("127.0.0.1", 3307, "cdc", "app")
        );
        assert_eq!(ep.password.as_ref().unwrap().expose(), "s:cret");
        assert_eq!(ep.tls, TlsMode::VerifyFull);
        assert!(!format!("{ep:?}").contains("s:cret"));
    }

    #[test]
    fn bad_urls() {
        for (url, needle) in [
            ("postgres://u@h/db", "expected mysql://"),
            ("mysql://h/db", "names no user"),
            ("mysql://u@h/db?sslmode=x", "sslmode=x"),
        ] {
            let e = MySqlEndpoint::from_url(url, None).unwrap_err();
            assert!(e.to_string().contains(needle), "{url}: {e}");
        }
    }
}
