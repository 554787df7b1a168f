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

/// A rule that does not compile, or whose replacement refers to a group its regex lacks.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("topic routing rule {index} ({pattern:?}): {reason}")]
pub struct RouteRuleError {
    pub index: usize,
    /// The regex, or the replacement when `in_replacement`.
    pub pattern: String,
    pub reason: String,
    /// The replacement is wrong, not the regex.
    pub in_replacement: bool,
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

/// The group names and numbers `replacement` (already in `regex` crate syntax) refers to.
fn group_refs(replacement: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = replacement.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'$' {
            i += 1;
            continue;
        }
        if b.get(i + 1) == Some(&b'$') {
            i += 2;
            continue;
        }
        if b.get(i + 1) == Some(&b'{') {
            if let Some(end) = replacement[i + 2..].find('}') {
                out.push(replacement[i + 2..i + 2 + end].to_string());
                i += end + 3;
                continue;
            }
        }
        let start = i + 1;
        let mut end = start;
        while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
            end += 1;
        }
        if end > start {
            out.push(replacement[start..end].to_string());
        }
        i = end.max(i + 1);
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
                reason: e.to_string().replace('\n', " "),
                in_replacement: false,
            })?;
            let replacement = java_replacement(replacement);
            for group in group_refs(&replacement) {
                let known = match group.parse::<usize>() {
                    Ok(n) => n < regex.captures_len(),
                    Err(_) => regex.capture_names().flatten().any(|n| n == group),
                };
                if !known {
                    return Err(RouteRuleError {
                        index,
                        pattern: replacement.clone(),
                        reason: format!(
                            "refers to group {group:?}, which the regex {pattern:?} does not have ({} numbered group(s))",
                            regex.captures_len() - 1
                        ),
                        in_replacement: true,
                    });
                }
            }
            compiled.push(RouteRule { regex, replacement });
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
        self.routed(name).unwrap_or_else(|| name.to_string())
    }

    /// The name the first matching rule gives `name`; `None` when no rule matches, or
    /// when the rule would give a topic the connector writes itself
    /// ([`TopicRouter::is_reserved`]: the name then stays as it is).
    pub fn routed(&self, name: &str) -> Option<String> {
        self.rules
            .iter()
            .find(|r| r.regex.is_match(name))
            .map(|r| r.regex.replace(name, r.replacement.as_str()).into_owned())
            .filter(|t| !self.is_reserved(t))
    }

    /// Whether `topic` is one the connector writes records of its own kind to (the
    /// transaction topic `<prefix>.transaction`): no table's records may go there, or a
    /// reader would take row changes for transaction boundaries.
    pub fn is_reserved(&self, topic: &str) -> bool {
        topic
            .strip_prefix(self.prefix.as_str())
            .is_some_and(|rest| rest == ".transaction")
    }

    /// The rules' replacements that name a reserved topic outright (no group
    /// references): `(rule index, replacement)`, for configuration checks.
    pub fn reserved_replacements(&self) -> Vec<(usize, String)> {
        self.rules
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.replacement.contains('$') && self.is_reserved(&r.replacement))
            .map(|(i, r)| (i, r.replacement.clone()))
            .collect()
    }

    /// The topic prefix (the connector's name).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The default (unrouted) topic of Postgres logical decoding messages.
    pub fn default_message_topic(&self) -> String {
        format!("{}.message", self.prefix)
    }

    /// The topic of a table's records.
    pub fn topic_for(&self, table: &TableId) -> String {
        self.route(&self.default_topic(table))
    }

    /// The topic of an event: its table's, or `<prefix>.message` for logical messages.
    pub fn topic_for_event(&self, ev: &ChangeEvent) -> String {
        match (&ev.table, ev.op) {
            (Some(t), op) if op != Op::Message => self.topic_for(&t.id),
            _ => self.route(&self.default_message_topic()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_table_is_routed_onto_the_transaction_topic() {
        let r = TopicRouter::new(
            "shop",
            &[
                (r"shop\.public\.tx", "shop.transaction"),
                (r"shop\.(.*)\.(.*)", "$1.$2"),
            ],
        )
        .unwrap();
        assert_eq!(r.topic_for(&TableId::new("public", "tx")), "shop.public.tx");
        assert_eq!(
            r.reserved_replacements(),
            vec![(0, "shop.transaction".to_string())]
        );
        // Through a group reference: found when it is routed.
        assert_eq!(
            r.topic_for(&TableId::new("shop", "transaction")),
            "shop.shop.transaction"
        );
        let r = TopicRouter::new("shop", &[(r"shop\.public\.(.*)", "shop.$1")]).unwrap();
        assert_eq!(
            r.topic_for(&TableId::new("public", "transaction")),
            "shop.public.transaction"
        );
        assert_eq!(r.topic_for(&TableId::new("public", "t")), "shop.t");
    }

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
        assert!(!e.in_replacement);
        assert!(e.to_string().contains("unclosed group"), "{e}");
        let e = TopicRouter::new("p", &[(r"p\.(.*)", "q.$2")]).unwrap_err();
        assert!(e.in_replacement && e.reason.contains("\"2\""), "{e}");
        let e = TopicRouter::new("p", &[(r"p\.(?<t>.*)", "q.${table}")]).unwrap_err();
        assert!(e.in_replacement && e.reason.contains("\"table\""), "{e}");
        let r = TopicRouter::new("p", &[(r"p\.(?<t>.*)", "q.${t}.$1$$")]).unwrap();
        assert_eq!(r.route("p.x"), "q.x.x$");
        assert_eq!(r.routed("z.x"), None);
    }

    #[test]
    fn java_style_groups() {
        assert_eq!(java_replacement("$1abc$22"), "${1}abc${22}");
        assert_eq!(java_replacement("${name}-$"), "${name}-$");
    }
}
