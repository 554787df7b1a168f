//! Topic names and routing.
//!
//! Default names are Debezium's: `<prefix>.<schema>.<table>` for Postgres,
//! `<prefix>.<database>.<table>` for MySQL/MariaDB (a [`TableId`]'s schema is the MySQL
//! database), and `<prefix>.message` for Postgres logical decoding messages.
//!
//! Routing rules rewrite the default name like Kafka Connect's `RegexRouter` /
//! Debezium's `ByLogicalTableRouter`: rules are tried in order; the first whose regex
//! matches the *whole* default name replaces it with its replacement, where `$1`, `${1}`
//! and `${name}` refer to capture groups (Java-style `$1` followed by letters is read as
//! group 1 then the letters, as Java reads it). Names no rule matches stay as they are.

use regex::Regex;

use crate::event::{ChangeEvent, Op};
use crate::table::TableId;

/// A routing rule as configured: a regex over the default topic name and a replacement.
#[derive(Clone, Debug)]
pub struct RouteRule {
    regex: Regex,
    replacement: String,
}

/// A rule that does not compile.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("topic routing rule {index} ({pattern:?}): {reason}; fix the regex in the routing configuration")]
pub struct RouteRuleError {
    pub index: usize,
    pub pattern: String,
    pub reason: String,
}

/// Rewrites Java-style `$1abc` group references into `${1}abc`, which the `regex` crate
/// would otherwise read as a group named `1abc`.
fn java_replacement(r: &str) -> String {
    let mut out = String::with_capacity(r.len() + 4);
    let mut chars = r.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(|d| d.is_ascii_digit()) {
            out.push_str("${");
            while let Some(d) = chars.peek().copied().filter(|d| d.is_ascii_digit()) {
                out.push(d);
                chars.next();
            }
            out.push('}');
        } else {
            out.push(c);
        }
    }
    out
}

/// Chooses the topic of every record.
#[derive(Clone, Debug)]
pub struct TopicRouter {
    prefix: String,
    rules: Vec<RouteRule>,
}

impl TopicRouter {
    /// `rules` are `(regex, replacement)` pairs, tried in order.
    pub fn new(prefix: &str, rules: &[(&str, &str)]) -> Result<Self, RouteRuleError> {
        let mut compiled = Vec::with_capacity(rules.len());
        for (index, (pattern, replacement)) in rules.iter().enumerate() {
            // Anchored: the rule must match the whole name, as Java's Matcher.matches().
            let regex = Regex::new(&format!("^(?:{pattern})$")).map_err(|e| RouteRuleError {
                index,
                pattern: pattern.to_string(),
                reason: e.to_string(),
            })?;
            compiled.push(RouteRule {
                regex,
                replacement: java_replacement(replacement),
            });
        }
        Ok(TopicRouter {
            prefix: prefix.to_string(),
            rules: compiled,
        })
    }

    /// The default (unrouted) topic of a table.
    pub fn default_topic(&self, table: &TableId) -> String {
        format!("{}.{}.{}", self.prefix, table.schema, table.name)
    }

    /// Applies the routing rules to a name.
    pub fn route(&self, name: &str) -> String {
        for r in &self.rules {
            if r.regex.is_match(name) {
                return r.regex.replace(name, r.replacement.as_str()).into_owned();
            }
        }
        name.to_string()
    }

    /// The topic of a table's records.
    pub fn topic_for(&self, table: &TableId) -> String {
        self.route(&self.default_topic(table))
    }

    /// The topic of an event: its table's, or `<prefix>.message` for logical messages.
    pub fn topic_for_event(&self, ev: &ChangeEvent) -> String {
        match (&ev.table, ev.op) {
            (Some(t), op) if op != Op::Message => self.topic_for(&t.id),
            _ => self.route(&format!("{}.message", self.prefix)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_names_and_rules() {
        let r = TopicRouter::new(
            "shop",
            &[
                (r"shop\.public\.orders_(\d+)", "shop.public.orders"),
                (r"([^.]+)\.([^.]+)\.(.*)", "$1.all_$3x"),
            ],
        )
        .unwrap();
        let t = TableId::new("public", "orders_2024");
        assert_eq!(r.default_topic(&t), "shop.public.orders_2024");
        assert_eq!(r.topic_for(&t), "shop.public.orders");
        assert_eq!(
            r.topic_for(&TableId::new("inv", "items")),
            "shop.all_itemsx"
        );
        // Whole-name match only.
        let r = TopicRouter::new("p", &[("public", "x")]).unwrap();
        assert_eq!(r.topic_for(&TableId::new("public", "t")), "p.public.t");
    }

    #[test]
    fn bad_rule_is_reported() {
        let e = TopicRouter::new("p", &[("ok", "x"), ("(", "y")]).unwrap_err();
        assert_eq!(e.index, 1);
        assert!(e.to_string().contains("fix the regex"));
    }

    #[test]
    fn java_style_groups() {
        assert_eq!(java_replacement("$1abc$22"), "${1}abc${22}");
        assert_eq!(java_replacement("${name}-$"), "${name}-$");
    }
}
