//! The Redis (and Valkey) target's keys of a `[[sink]]` section, and the connection
//! address they give.
//!
//! Invariants: after [`resolve`] the URL was parsed (`redis://[user[:pass]@]host[:port][/db]`,
//! no TLS), the password came from exactly one place (`password_file` wins over
//! `password`, which wins over the URL's), the key template names the row, and `ttl_ms`
//! is positive. The password is never in a `Debug` or log line: [`Address`]'s `Debug`
//! prints `***`.

use cdc_schemas::config_keys::KeyError;
use serde::Deserialize;

use crate::config::SinkSpec;
use crate::view::KeyTemplate;

/// The target keys as written.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// `redis://[user:pass@]host:port/db` (required).
    pub url: String,
    /// Secret; wins over the URL's password.
    #[serde(default)]
    pub password: Option<String>,
    /// A file holding the password (trailing newline ignored); wins over `password`.
    #[serde(default)]
    pub password_file: Option<String>,
    /// Name template of a row's key (default `{prefix}:{table}:{key}`).
    #[serde(default = "default_key")]
    pub key: String,
    /// `{prefix}` in the template and the sink's own keys (default: the connector's name).
    #[serde(default)]
    pub prefix: Option<String>,
    /// "json" (a string holding the after-image) or "hash" (a field per column).
    #[serde(default = "default_value")]
    pub value: String,
    /// Expire rows this long after their last change.
    #[serde(default)]
    pub ttl_ms: Option<u64>,
    /// "upsert" (keep the rows) or "invalidate" (delete the key on every change).
    #[serde(default = "default_mode")]
    pub mode: String,
    /// Apply each source transaction atomically.
    #[serde(default)]
    pub transactional: bool,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("url", &redact_url(&self.url))
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("password_file", &self.password_file)
            .field("key", &self.key)
            .field("prefix", &self.prefix)
            .field("value", &self.value)
            .field("ttl_ms", &self.ttl_ms)
            .field("mode", &self.mode)
            .field("transactional", &self.transactional)
            .finish()
    }
}

fn default_key() -> String {
    "{prefix}:{table}:{key}".into()
}
fn default_value() -> String {
    "json".into()
}
fn default_mode() -> String {
    "upsert".into()
}

/// How a row is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    Json,
    Hash,
}

/// What a change does to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Upsert,
    Invalidate,
}

/// Where and how to connect.
#[derive(Clone, PartialEq, Eq)]
pub struct Address {
    pub host: String,
    pub port: u16,
    pub db: u32,
    pub user: Option<String>,
    pub password: Option<String>,
}

impl std::fmt::Debug for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "redis://{}{}:{}/{}",
            match (&self.user, &self.password) {
                (Some(u), Some(_)) => format!("{u}:***@"),
                (Some(u), None) => format!("{u}@"),
                (None, Some(_)) => ":***@".into(),
                (None, None) => String::new(),
            },
            self.host,
            self.port,
            self.db
        )
    }
}

/// The settings, checked and resolved.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub address: Address,
    pub template: KeyTemplate,
    pub prefix: String,
    pub value: ValueKind,
    pub ttl_ms: Option<u64>,
    pub mode: Mode,
    pub transactional: bool,
}

/// The URL with any password replaced by `***`, for messages.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let userinfo = &url[s + 3..at];
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!("{}{user}:***{}", &url[..s + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "a '%' not followed by two hex digits".to_string())?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "percent-escapes that are not UTF-8".to_string())
}

/// Parses `redis://[user[:pass]@]host[:port][/db]`.
pub fn parse_url(url: &str) -> Result<Address, String> {
    let rest = if let Some(r) = url.strip_prefix("redis://") {
        r
    } else if url.starts_with("rediss://") {
        return Err("TLS (rediss://) is not supported: use redis:// on a trusted network or through a TLS tunnel".into());
    } else {
        return Err("write redis://[user:pass@]host:port/db".into());
    };
    let (userinfo, hostpart) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let (user, password) = match userinfo {
        None => (None, None),
        Some(ui) => {
            let (u, p) = match ui.split_once(':') {
                Some((u, p)) => (u, Some(percent_decode(p)?)),
                None => (ui, None),
            };
            let u = percent_decode(u)?;
            (if u.is_empty() { None } else { Some(u) }, p)
        }
    };
    let (hostport, db) = match hostpart.split_once('/') {
        Some((h, d)) => (h, d),
        None => (hostpart, ""),
    };
    if hostport.contains('?') || db.contains('?') {
        return Err("URL parameters are not supported: use the sink's keys".into());
    }
    let db: u32 = if db.is_empty() {
        0
    } else {
        db.parse()
            .map_err(|_| format!("database {db:?} is not a number"))?
    };
    let (host, port) = if let Some(h) = hostport.strip_prefix('[') {
        // [::1]:6379
        let (h, p) = h
            .split_once(']')
            .ok_or_else(|| "an IPv6 address without its ']'".to_string())?;
        (h.to_string(), p.strip_prefix(':').unwrap_or(""))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p),
            None => (hostport.to_string(), ""),
        }
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    let port = if port.is_empty() {
        6379
    } else {
        port.parse()
            .map_err(|_| format!("port {port:?} is not a number"))?
    };
    Ok(Address {
        host,
        port,
        db,
        user,
        password,
    })
}

/// Reads and checks the target keys of `spec` (the password file is read too, so a
/// missing file is an error at load).
pub fn resolve(spec: &SinkSpec) -> Result<Resolved, KeyError> {
    let s: Settings = spec.target_settings()?;
    let key = |k: &str| format!("{}.{k}", spec.path);
    let mut address =
        parse_url(&s.url).map_err(|m| (key("url"), format!("{}: {m}", redact_url(&s.url))))?;
    if let Some(p) = &s.password {
        address.password = Some(p.clone());
    }
    if let Some(f) = &s.password_file {
        let text = std::fs::read_to_string(f)
            .map_err(|e| (key("password_file"), format!("{f:?}: {e}")))?;
        let p = text.strip_suffix('\n').unwrap_or(&text);
        let p = p.strip_suffix('\r').unwrap_or(p);
        if p.is_empty() {
            return Err((key("password_file"), format!("{f:?} is empty")));
        }
        address.password = Some(p.to_string());
    }
    let prefix = s.prefix.clone().unwrap_or_else(|| spec.connector.clone());
    if prefix.is_empty() {
        return Err((key("prefix"), "must not be empty".into()));
    }
    let template = KeyTemplate::parse(&s.key, &prefix).map_err(|m| (key("key"), m))?;
    let value = match s.value.as_str() {
        "json" => ValueKind::Json,
        "hash" => ValueKind::Hash,
        v => {
            return Err((
                key("value"),
                format!("{v:?}: use \"json\" (a string) or \"hash\" (a field per column)"),
            ))
        }
    };
    let mode = match s.mode.as_str() {
        "upsert" => Mode::Upsert,
        "invalidate" => Mode::Invalidate,
        v => {
            return Err((
                key("mode"),
                format!("{v:?}: use \"upsert\" or \"invalidate\""),
            ))
        }
    };
    if s.ttl_ms == Some(0) {
        return Err((key("ttl_ms"), "0: leave it out for no expiry".into()));
    }
    Ok(Resolved {
        address,
        template,
        prefix,
        value,
        ttl_ms: s.ttl_ms,
        mode,
        transactional: s.transactional,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let a = parse_url("redis://127.0.0.1:6380/2").unwrap();
        assert_eq!((a.host.as_str(), a.port, a.db), ("127.0.0.1", 6380, 2));
        assert_eq!((a.user, a.password), (None, None));
        let a = parse_url("redis://app:s%40cret@cache").unwrap();
        assert_eq!((a.port, a.db), (6379, 0));
        assert_eq!(a.user.as_deref(), Some("app"));
        assert_eq!(a.password.as_deref(), Some("s@cret"));
        assert!(!format!("{a:?}").contains("cret"));
        let a = parse_url("redis://:pw@[::1]:7000/1").unwrap();
        assert_eq!((a.host.as_str(), a.port, a.db), ("::1", 7000, 1));
        assert_eq!((a.user, a.password.as_deref()), (None, Some("pw")));
        for bad in [
            "rediss://h",
            "http://h",
            "redis://h:x",
            "redis://h/x",
            "redis://",
            "redis://h?a=1",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
        assert_eq!(
            redact_url("redis://u:secret@h:1/0"),
            "redis://u:***@h:1/0".to_string()
        );
    }
}
