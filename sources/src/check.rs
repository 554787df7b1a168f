//! `cdc check`: preflight checks of the source database, before the first run.
//!
//! Each check yields a [`CheckItem`]: pass, info (a setting worth knowing), warn (works,
//! but risky), fail (the connector cannot run), or skip (could not be checked because an
//! earlier check failed). Every failure says what is wrong and gives the exact statement or
//! setting that fixes it. The report fails when any item fails.
//!
//! Checks only read: they never create a slot, a publication or anything else.
//!
//! This module owns the report; each source's checks live in its own folder
//! (`postgres/check.rs`, `mysql/check.rs`) and [`crate::check`] picks them.

use std::fmt::Write as _;

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Pass,
    Info,
    Warn,
    Fail,
    Skip,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Pass => "ok",
            Status::Info => "info",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        }
    }
}

/// One check's result.
#[derive(Debug, Clone)]
pub struct CheckItem {
    /// A short stable identifier (`wal_level`, `replication_privilege`, ...).
    pub name: String,
    pub status: Status,
    pub detail: String,
    /// The statement or setting that fixes a failure or warning.
    pub fix: Option<String>,
}

/// All checks of one source.
#[derive(Debug, Clone)]
pub struct CheckReport {
    /// What was checked (redacted URL).
    pub target: String,
    pub items: Vec<CheckItem>,
}

impl CheckReport {
    pub(crate) fn new(target: String) -> Self {
        CheckReport {
            target,
            items: Vec::new(),
        }
    }

    pub(crate) fn push(
        &mut self,
        name: &str,
        status: Status,
        detail: impl Into<String>,
        fix: Option<String>,
    ) {
        self.items.push(CheckItem {
            name: name.to_string(),
            status,
            detail: detail.into(),
            fix,
        });
    }

    pub(crate) fn pass(&mut self, name: &str, detail: impl Into<String>) {
        self.push(name, Status::Pass, detail, None);
    }

    pub(crate) fn info(&mut self, name: &str, detail: impl Into<String>) {
        self.push(name, Status::Info, detail, None);
    }

    pub(crate) fn warn(&mut self, name: &str, detail: impl Into<String>, fix: impl Into<String>) {
        self.push(name, Status::Warn, detail, Some(fix.into()));
    }

    pub(crate) fn fail(&mut self, name: &str, detail: impl Into<String>, fix: impl Into<String>) {
        self.push(name, Status::Fail, detail, Some(fix.into()));
    }

    pub(crate) fn skip(&mut self, names: &[&str], why: &str) {
        for n in names {
            self.push(n, Status::Skip, why, None);
        }
    }

    /// True when no check failed.
    pub fn ok(&self) -> bool {
        self.items.iter().all(|i| i.status != Status::Fail)
    }

    pub fn failures(&self) -> impl Iterator<Item = &CheckItem> {
        self.items.iter().filter(|i| i.status == Status::Fail)
    }

    /// The item named `name`, if the report has it.
    pub fn item(&self, name: &str) -> Option<&CheckItem> {
        self.items.iter().find(|i| i.name == name)
    }

    /// Human-readable form, one line per check plus its fix.
    pub fn render_text(&self) -> String {
        let mut s = format!("cdc check: {}\n\n", self.target);
        let width = self.items.iter().map(|i| i.name.len()).max().unwrap_or(0);
        for i in &self.items {
            let _ = writeln!(
                s,
                "  {:<5} {:<width$}  {}",
                i.status.label(),
                i.name,
                i.detail
            );
            if let Some(fix) = &i.fix {
                for (n, line) in fix.lines().enumerate() {
                    let lead = if n == 0 { "fix:" } else { "    " };
                    let _ = writeln!(s, "  {:<5} {:<width$}    {lead} {line}", "", "");
                }
            }
        }
        let failed = self.failures().count();
        let warned = self
            .items
            .iter()
            .filter(|i| i.status == Status::Warn)
            .count();
        let _ = writeln!(
            s,
            "\n{}",
            match (failed, warned) {
                (0, 0) => "All checks passed.".to_string(),
                (0, w) => format!("All checks passed, {w} warning(s)."),
                (f, _) =>
                    format!("{f} check(s) failed: the connector cannot run until they are fixed."),
            }
        );
        s
    }

    /// Machine-readable form.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "target": self.target,
            "ok": self.ok(),
            "checks": self.items.iter().map(|i| serde_json::json!({
                "name": i.name,
                "status": i.status.label().to_ascii_lowercase(),
                "detail": i.detail,
                "fix": i.fix,
            })).collect::<Vec<_>>(),
        })
    }
}

/// Quotes an identifier for SQL in a fix message (Postgres and MySQL styles).
pub(crate) fn pg_ident(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !s.as_bytes()[0].is_ascii_digit()
    {
        s.to_string()
    } else {
        format!("\"{}\"", s.replace('"', "\"\""))
    }
}

pub(crate) fn my_ident(s: &str) -> String {
    format!("`{}`", s.replace('`', "``"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_fails_on_any_failure_and_renders_fixes() {
        let mut r = CheckReport::new("postgres x".into());
        r.pass("connect", "fine");
        r.warn("retention", "unbounded", "set it");
        assert!(r.ok());
        r.fail(
            "wal_level",
            "is replica",
            "ALTER SYSTEM SET wal_level = logical;\nthen restart",
        );
        assert!(!r.ok());
        let t = r.render_text();
        assert!(
            t.contains("FAIL  wal_level")
                && t.contains("fix: ALTER SYSTEM SET wal_level = logical;"),
            "{t}"
        );
        assert!(
            t.contains("then restart") && t.contains("1 check(s) failed"),
            "{t}"
        );
        assert_eq!(r.to_json()["ok"], false);
    }

    #[test]
    fn identifiers_quoted() {
        assert_eq!(pg_ident("orders"), "orders");
        assert_eq!(pg_ident("Orders"), "\"Orders\"");
        assert_eq!(pg_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(my_ident("a`b"), "`a``b`");
    }
}
