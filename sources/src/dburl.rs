//! The part of connection-URL parsing that Postgres and MySQL share: scheme check,
//! percent-decoded user, password, host, port and database, the query parameters, and a
//! redacted form for messages. Each database's endpoint interprets the parameters itself.

use std::time::Duration;

use percent_encoding::percent_decode_str;

use crate::secret::{redact_url, Secret};
use crate::tls::TlsMode;

/// A connection URL taken apart.
#[derive(Debug)]
pub struct DbUrl {
    pub host: String,
    pub port: Option<u16>,
    pub user: String,
    pub password: Option<Secret>,
    /// The path without its leading `/`; may be empty.
    pub database: String,
    /// Query parameters, decoded, in order.
    pub params: Vec<(String, String)>,
    /// The URL with its password masked.
    pub redacted: String,
}

/// What is wrong with a URL, and what to write instead.
#[derive(Debug)]
pub struct UrlProblem {
    pub message: String,
    pub fix: String,
}

impl UrlProblem {
    pub fn new(message: impl Into<String>, fix: impl Into<String>) -> Self {
        UrlProblem {
            message: message.into(),
            fix: fix.into(),
        }
    }
}

/// Parses `url`, which must use one of `schemes`; `example` is shown in the fix.
pub fn parse(url: &str, schemes: &[&str], example: &str) -> Result<DbUrl, UrlProblem> {
    let redacted = redact_url(url);
    let u = url::Url::parse(url).map_err(|e| {
        UrlProblem::new(
            format!("source.url {redacted} is not a URL: {e}"),
            format!("write it as {example}"),
        )
    })?;
    if !schemes.contains(&u.scheme()) {
        return Err(UrlProblem::new(
            format!(
                "source.url {redacted} has scheme {:?}, expected {}://",
                u.scheme(),
                schemes[0]
            ),
            format!("write it as {example}, or set source.type to match"),
        ));
    }
    let decode = |s: &str| percent_decode_str(s).decode_utf8_lossy().into_owned();
    let host = u
        .host_str()
        .map(decode)
        .unwrap_or_else(|| "localhost".into());
    Ok(DbUrl {
        // IPv6 literals come back bracketed from host_str.
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port: u.port(),
        user: decode(u.username()),
        password: u.password().map(|p| Secret::new(decode(p))),
        database: decode(u.path().trim_start_matches('/')),
        params: u
            .query_pairs()
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect(),
        redacted,
    })
}

/// An `sslmode` parameter value.
pub fn tls_mode(value: &str, accepted: &str) -> Result<TlsMode, UrlProblem> {
    TlsMode::parse(value).ok_or_else(|| {
        UrlProblem::new(
            format!("source.url: sslmode={value} is not a TLS mode"),
            format!("use one of {accepted}"),
        )
    })
}

/// A `connect_timeout` parameter value (whole seconds, at least 1).
pub fn timeout_secs(value: &str) -> Result<Duration, UrlProblem> {
    let secs: u64 = value.parse().map_err(|_| {
        UrlProblem::new(
            format!("source.url: connect_timeout={value} is not a number of seconds"),
            "write connect_timeout=10",
        )
    })?;
    Ok(Duration::from_secs(secs.max(1)))
}

/// A parameter this database does not know.
pub fn unknown(name: &str, supported: &str) -> UrlProblem {
    UrlProblem::new(
        format!("source.url: unknown parameter {name:?}"),
        format!("supported parameters: {supported}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_apart_and_decodes() {
        let u = parse(
            "postgres://u%40x:p%3Aw@[::1]:6543/d%20b?a=1&b=%2F",
            &["postgres"],
            "postgres://…",
        )
        .unwrap();
        assert_eq!(
            (
                u.host.as_str(),
                u.port,
                u.user.as_str(),
                u.database.as_str()
            ),
            ("::1", Some(6543), "u@x", "d b")
        );
        assert_eq!(u.password.unwrap().expose(), "p:w");
        assert_eq!(
            u.params,
            vec![("a".into(), "1".into()), ("b".into(), "/".into())]
        );
        assert!(!u.redacted.contains("p%3Aw"));
    }

    #[test]
    fn wrong_scheme_and_garbage() {
        assert!(parse("mysql://u@h/d", &["postgres"], "x")
            .unwrap_err()
            .message
            .contains("expected postgres://"));
        assert!(parse("::", &["postgres"], "x")
            .unwrap_err()
            .message
            .contains("not a URL"));
    }
}
