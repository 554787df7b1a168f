//! Secrets (passwords, tokens) that must never reach a log line or a `Debug` print.

use std::fmt;

/// A secret string. `Debug` and `Display` print `***`; read it with [`Secret::expose`]
/// only where it is handed to a driver.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"***\"")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

/// `url` with its password (if any) replaced by `***`, for messages and logs.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        Ok(u) => u.to_string(),
        // Not a URL: we cannot tell where a password would be, so show nothing of it.
        Err(_) => "<unparseable url>".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_printed() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?} {s}"), "\"***\" ***");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn urls_redacted() {
        let r = redact_url("postgres://u:hunter2@h:5432/db?sslmode=require");
        assert!(!r.contains("hunter2") && r.contains("u:***@h:5432"), "{r}");
        assert_eq!(redact_url("mysql://u@h/db"), "mysql://u@h/db");
        assert_eq!(redact_url("not a url hunter2"), "<unparseable url>");
    }
}
