//! The README's configuration reference against the parser: every key the reference
//! blocks show is one the configuration knows (and the blocks load), and every key the
//! configuration knows is shown there. Docs and code cannot drift apart silently.
//!
//! The blocks: the ```toml block under "## Configuration", the one under
//! "## The Postgres source", the one under "## Kafka as the log" and the one under
//! "## Sinks" (each target's keys are shown in its own subsection's block). A commented-out key (`# bearer_token = "..."`) counts as
//! shown, but is left out of loading.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use cdc_connector::config::{known_keys, Config};

const README: &str = include_str!("../../README.md");

/// The first ```toml block after the heading `heading`.
fn toml_block_after(heading: &str) -> &'static str {
    let at = README
        .lines()
        .scan(0usize, |pos, l| {
            let start = *pos;
            *pos += l.len() + 1;
            Some((start, l))
        })
        .find(|(_, l)| l.trim_end() == heading || l.starts_with(&format!("{heading} ")))
        .map(|(start, _)| start)
        .unwrap_or_else(|| panic!("README has no heading {heading:?}"));
    let rest = &README[at..];
    let open = rest
        .find("```toml\n")
        .unwrap_or_else(|| panic!("no ```toml block after {heading:?}"))
        + "```toml\n".len();
    let len = rest[open..].find("\n```").expect("the block is closed");
    &rest[open..open + len + 1]
}

/// `text` with commented-out `key = value` lines made real.
fn uncommented(text: &str) -> String {
    text.lines()
        .map(|l| {
            let t = l.trim_start();
            match t.strip_prefix("# ") {
                Some(rest)
                    if rest.split_once(" = ").is_some_and(|(k, _)| {
                        !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    }) =>
                {
                    rest.to_string()
                }
                _ => l.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn parse(text: &str, what: &str) -> toml::Table {
    text.parse()
        .unwrap_or_else(|e| panic!("the README's {what} block is not valid TOML: {e}\n{text}"))
}

/// section ("" = top level) → keys, of a parsed block.
fn keys_of(t: &toml::Table, out: &mut BTreeMap<String, BTreeSet<String>>) {
    for (k, v) in t {
        out.entry(String::new()).or_default().insert(k.clone());
        let tables: Vec<&toml::Table> = match v {
            toml::Value::Table(t) => vec![t],
            toml::Value::Array(a) => a.iter().filter_map(|x| x.as_table()).collect(),
            _ => vec![],
        };
        for sub in tables {
            let keys = out.entry(k.clone()).or_default();
            keys.extend(sub.keys().cloned());
        }
    }
}

fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for (heading, what) in [
        ("## Configuration", "configuration"),
        ("## The Postgres source", "Postgres source"),
        ("## Kafka as the log", "Kafka log"),
        ("## Sinks:", "sinks"),
        ("### Redis and Valkey", "Redis sink"),
        ("### Typesense", "Typesense sink"),
        ("### Elasticsearch and OpenSearch", "Elasticsearch sink"),
    ] {
        keys_of(
            &parse(&uncommented(toml_block_after(heading)), what),
            &mut out,
        );
    }
    out
}

fn known() -> BTreeMap<String, BTreeSet<String>> {
    known_keys()
        .into_iter()
        .map(|(s, ks)| (s.to_string(), ks.into_iter().map(String::from).collect()))
        .collect()
}

#[test]
fn every_key_in_the_readme_is_known_to_the_parser() {
    let known = known();
    let mut unknown = Vec::new();
    for (section, keys) in documented() {
        let Some(k) = known.get(&section) else {
            unknown.push(format!("[{section}] (the whole section)"));
            continue;
        };
        for key in keys.difference(k) {
            unknown.push(if section.is_empty() {
                key.clone()
            } else {
                format!("{section}.{key}")
            });
        }
    }
    assert!(
        unknown.is_empty(),
        "the README documents keys the configuration does not know: {unknown:?}"
    );
}

#[test]
fn every_key_the_parser_knows_is_in_the_readme() {
    let documented = documented();
    let mut missing = Vec::new();
    for (section, keys) in known() {
        let shown = documented.get(&section).cloned().unwrap_or_default();
        for key in keys.difference(&shown) {
            missing.push(if section.is_empty() {
                key.clone()
            } else {
                format!("{section}.{key}")
            });
        }
    }
    assert!(
        missing.is_empty(),
        "keys the configuration knows but the README's reference blocks never show: {missing:?}"
    );
}

fn source(t: &mut toml::Table) -> &mut toml::Table {
    t.get_mut("source")
        .and_then(|s| s.as_table_mut())
        .expect("[source]")
}

/// The blocks are not only known keys but a configuration that loads: as a Postgres
/// source (the reference block plus the Postgres block), and as a MySQL one.
#[test]
fn the_reference_blocks_load() {
    let mut pg = parse(toml_block_after("## Configuration"), "configuration");
    let pg_block = parse(
        toml_block_after("## The Postgres source"),
        "Postgres source",
    );
    for (section, v) in pg_block {
        let into = pg
            .entry(section.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let (Some(into), toml::Value::Table(add)) = (into.as_table_mut(), v) else {
            panic!("[{section}] of the Postgres block is not a table");
        };
        into.extend(add);
    }
    let mut mysql = pg.clone();
    // The reference shows keys of both databases side by side.
    for k in cdc_sources::config::fields_of::<cdc_sources::mysql::config::MySqlSettings>() {
        source(&mut pg).remove(*k);
    }
    let c = Config::from_parts(Path::new("README.md"), &pg.to_string(), std::iter::empty())
        .unwrap_or_else(|e| panic!("the README's Postgres configuration does not load: {e}"));
    assert_eq!(c.routing.len(), 1);
    let s = source(&mut mysql);
    for k in cdc_sources::config::fields_of::<cdc_sources::postgres::config::PgSettings>() {
        s.remove(*k);
    }
    s.insert("type".into(), "mysql".into());
    s.insert("url".into(), "mysql://cdc@127.0.0.1:3306/app".into());
    Config::from_parts(
        Path::new("README.md"),
        &mysql.to_string(),
        std::iter::empty(),
    )
    .unwrap_or_else(|e| panic!("the README's MySQL configuration does not load: {e}"));
}

/// The sink blocks load too: the common keys with the Redis block's target keys as one
/// sink, and the Typesense and Elasticsearch blocks as two more, beside the Postgres
/// configuration.
#[test]
fn the_sink_blocks_load() {
    let mut config = parse(toml_block_after("## Configuration"), "configuration");
    for k in cdc_sources::config::fields_of::<cdc_sources::mysql::config::MySqlSettings>() {
        source(&mut config).remove(*k);
    }
    let only_sink = |heading: &str| -> toml::Table {
        let t = parse(&uncommented(toml_block_after(heading)), heading);
        let sinks = t["sink"].as_array().expect("[[sink]]");
        assert_eq!(sinks.len(), 1, "{heading}: one [[sink]]");
        sinks[0].as_table().unwrap().clone()
    };
    let mut redis = only_sink("## Sinks:");
    redis.extend(only_sink("### Redis and Valkey"));
    // Commented-out alternatives: keep one of each.
    redis.remove("password_file");
    let mut typesense = only_sink("### Typesense");
    typesense.remove("api_key_file");
    typesense.remove("schema_file");
    let mut es = only_sink("### Elasticsearch and OpenSearch");
    es.remove("password_file");
    es.remove("mapping_file");
    config.insert(
        "sink".into(),
        toml::Value::Array(vec![redis.into(), typesense.into(), es.into()]),
    );
    let c = Config::from_parts(
        Path::new("README.md"),
        &config.to_string(),
        std::iter::empty(),
    )
    .unwrap_or_else(|e| panic!("the README's sink blocks do not load: {e}"));
    assert_eq!(c.sinks.len(), 3);
}
