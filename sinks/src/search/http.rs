//! The HTTP side both search sinks share: the client (rustls, bounded timeouts), the
//! secret settings (`api_key` / `password`, inline or from a file, never printed), and
//! how a failed request is classified.
//!
//! Classification: a request that did not get an answer (connection refused or reset, a
//! timeout) and the statuses 408, 429 and 5xx are transient (the engine is starting,
//! overloaded, or failing over); 401/403 are definite (the credentials); any other
//! status of a collection-level request is definite, naming the fix. Per-document
//! statuses are the sinks' own business (a 4xx there is a rejected change).

use std::path::PathBuf;
use std::time::Duration;

use cdc_schemas::config_keys::KeyError;
use serde::Deserialize;

use crate::SinkError;

/// How long one request may take (a bulk request of `batch_documents` documents).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A secret setting: prints as `***`.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Secret(s)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// The secret of `key` or of `file_key` (a file holding it; one trailing newline is
/// not part of it). Both set is an error; neither is `None`.
pub fn secret(
    path: &str,
    key: &str,
    value: Option<&Secret>,
    file_key: &str,
    file: Option<&PathBuf>,
) -> Result<Option<String>, KeyError> {
    match (value, file) {
        (Some(_), Some(_)) => Err((
            format!("{path}.{file_key}"),
            format!("set {key} or {file_key}, not both"),
        )),
        (Some(v), None) => Ok(Some(v.expose().to_string())),
        (None, Some(f)) => {
            let text = std::fs::read_to_string(f).map_err(|e| {
                (
                    format!("{path}.{file_key}"),
                    format!("{}: {e}", f.display()),
                )
            })?;
            let text = text.strip_suffix('\n').unwrap_or(&text);
            let text = text.strip_suffix('\r').unwrap_or(text);
            Ok(Some(text.to_string()))
        }
        (None, None) => Ok(None),
    }
}

/// `url` checked: http or https, a host, no credentials inside (they have their keys).
pub fn base_url(path: &str, url: &str) -> Result<reqwest::Url, KeyError> {
    let key = || format!("{path}.url");
    let u = reqwest::Url::parse(url).map_err(|e| (key(), format!("not a URL: {e}")))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err((key(), "use http:// or https://".into()));
    }
    if u.host_str().is_none() {
        return Err((key(), "the URL has no host".into()));
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err((
            key(),
            "no credentials in the URL: use the sink's secret keys".into(),
        ));
    }
    Ok(u)
}

/// `base` joined with path segments (each percent-encoded as needed) and a query.
pub fn endpoint(base: &reqwest::Url, segments: &[&str], query: &[(&str, &str)]) -> reqwest::Url {
    let mut u = base.clone();
    {
        let mut p = u.path_segments_mut().expect("http(s) URLs have paths");
        p.pop_if_empty();
        for s in segments {
            p.push(s);
        }
    }
    if !query.is_empty() {
        u.query_pairs_mut().extend_pairs(query);
    }
    u
}

/// The client every request of one sink goes through.
pub fn client() -> Result<reqwest::Client, SinkError> {
    reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .map_err(|e| {
            SinkError::definite(
                "building the HTTP client",
                e.to_string(),
                "report this as a bug",
            )
            .caused_by(e)
        })
}

/// A request that got no (whole) answer: transient.
pub fn no_answer(what: &str, e: reqwest::Error) -> SinkError {
    // Without the URL: it is ours, and the error's text repeats it at length.
    let detail = e.without_url().to_string();
    SinkError::transient(what.to_string(), detail)
}

/// Whether an HTTP status is worth retrying.
pub fn is_transient_status(status: u16) -> bool {
    status == 408 || status == 429 || status >= 500
}

/// A request answered with a failure status. `fix` says what to do about a definite one.
pub fn failed(what: &str, status: u16, body: &str, fix: &str) -> SinkError {
    let detail = format!("HTTP {status}: {}", short(body));
    if is_transient_status(status) {
        SinkError::transient(what.to_string(), detail)
    } else if status == 401 || status == 403 {
        SinkError::definite(
            what.to_string(),
            detail,
            "check the sink's credentials (and that they may write the collection / index)",
        )
    } else {
        SinkError::definite(what.to_string(), detail, fix.to_string())
    }
}

/// At most 300 characters of an engine's message.
pub fn short(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_secrets_and_statuses() {
        let b = base_url("sink[0]", "http://127.0.0.1:8108/").unwrap();
        assert_eq!(
            endpoint(&b, &["collections", "a b/c"], &[("action", "upsert")]).as_str(),
            "http://127.0.0.1:8108/collections/a%20b%2Fc?action=upsert"
        );
        assert!(base_url("s", "ftp://x").is_err());
        assert!(base_url("s", "http://u:p@x").is_err());
        assert_eq!(format!("{:?}", Secret("hunter2".into())), "***");
        let dir = tempfile_dir();
        let f = dir.join("key");
        std::fs::write(&f, "k3y\n").unwrap();
        assert_eq!(
            secret("s", "api_key", None, "api_key_file", Some(&f)).unwrap(),
            Some("k3y".to_string())
        );
        assert!(secret("s", "a", Some(&Secret("x".into())), "b", Some(&f)).is_err());
        assert!(failed("w", 503, "", "").is_transient());
        assert!(failed("w", 429, "", "").is_transient());
        assert!(!failed("w", 400, "", "").is_transient());
        assert!(!failed("w", 401, "", "").is_transient());
        assert_eq!(short(&"x".repeat(400)).chars().count(), 301);
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("cdc-sinks-http-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
