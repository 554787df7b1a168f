//! The collection (Typesense) or index (Elasticsearch) a table's documents go to, from a
//! template such as `"{table}"` or `"{prefix}_{schema}_{table}"`: `{schema}` (or `{db}`),
//! `{table}` and `{prefix}` (the connector's name, the topics' prefix) are replaced,
//! everything else is kept. Rendered names are cached per table.

use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Prefix,
    Schema,
    Table,
}

/// A parsed name template.
#[derive(Debug, Clone)]
pub struct NameTemplate {
    parts: Vec<Part>,
    prefix: String,
    /// Applied to every rendered name (Elasticsearch's lowercase index names).
    normalize: fn(String) -> String,
    cache: HashMap<(Arc<str>, Arc<str>), Arc<str>>,
}

impl NameTemplate {
    /// Parses `template`; `{prefix}` becomes `prefix`. An error says what is wrong.
    pub fn parse(
        template: &str,
        prefix: &str,
        normalize: fn(String) -> String,
    ) -> Result<NameTemplate, String> {
        let mut parts = Vec::new();
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_string()));
            }
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| format!("{template:?}: a '{{' without its '}}'"))?
                + open;
            parts.push(match &rest[open + 1..close] {
                "prefix" => Part::Prefix,
                "schema" | "db" => Part::Schema,
                "table" => Part::Table,
                other => {
                    return Err(format!(
                        "{template:?}: {{{other}}} is not a placeholder here (use {{schema}}, {{table}}, {{prefix}})"
                    ))
                }
            });
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        if parts.is_empty() {
            return Err("the name is empty".into());
        }
        Ok(NameTemplate {
            parts,
            prefix: prefix.to_string(),
            normalize,
            cache: HashMap::new(),
        })
    }

    /// Whether every table gets a name of its own (the template has `{table}`): a
    /// truncate then clears one table's documents only.
    pub fn names_table(&self) -> bool {
        self.parts.contains(&Part::Table)
    }

    /// The name for `schema.table`.
    pub fn render(&mut self, schema: &Arc<str>, table: &Arc<str>) -> Arc<str> {
        if let Some(n) = self.cache.get(&(schema.clone(), table.clone())) {
            return n.clone();
        }
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Prefix => out.push_str(&self.prefix),
                Part::Schema => out.push_str(schema),
                Part::Table => out.push_str(table),
            }
        }
        let name: Arc<str> = (self.normalize)(out).into();
        self.cache
            .insert((schema.clone(), table.clone()), name.clone());
        name
    }
}

/// Names as they are.
pub fn unchanged(s: String) -> String {
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_render_and_reject_unknown_placeholders() {
        let mut t = NameTemplate::parse("{prefix}_{schema}.{table}", "app", unchanged).unwrap();
        assert_eq!(
            &*t.render(&"public".into(), &"orders".into()),
            "app_public.orders"
        );
        assert!(t.names_table());
        let mut lower = NameTemplate::parse("{table}", "", |s| s.to_lowercase()).unwrap();
        assert_eq!(&*lower.render(&"s".into(), &"Orders".into()), "orders");
        assert!(!NameTemplate::parse("all", "", unchanged)
            .unwrap()
            .names_table());
        assert!(NameTemplate::parse("{key}", "", unchanged).is_err());
        assert!(NameTemplate::parse("{table", "", unchanged).is_err());
        assert!(NameTemplate::parse("", "", unchanged).is_err());
    }
}
