//! The comparison machinery of the Debezium golden tests (`tests/tests/pg_golden.rs`,
//! `tests/tests/my_golden.rs`): reading a capture (`tests/golden/debezium_*.jsonl`) and our
//! log as records per topic, blanking the volatile fields, applying a test's deviation rules,
//! diffing key and value field by field, and reporting every difference at the end.
//!
//! What a source's test keeps: its SQL, its captures and configs, its rules (what may differ
//! and why). What this module owns is the same for every source: how records pair up (in
//! order per topic), what counts as a difference (a missing or extra field, a value, the
//! order of keys and of struct-schema fields), and that every rule must match at least once
//! so that a list of rules cannot go stale.
//!
//! [`read_log`] (every record of a topic with partition and offset) also serves the
//! pg_source_* tests (`pg_source_util::read_topic`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use cdc_log::{Log, StartAt};
use serde_json::{json, Value as Json};

/// One record: key and value as JSON (`None`: no key / tombstone), and (ours only: the
/// captures hold no headers) its headers as (key, value as UTF-8 text, lossy).
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub key: Option<Json>,
    pub value: Option<Json>,
    pub headers: Vec<(String, String)>,
}

/// A record of each side in a topic (`want`: Debezium's, `got`: ours), normalised in place by
/// the rules.
pub struct Pair<'a> {
    pub want: &'a mut Record,
    pub got: &'a mut Record,
}

/// A rule: a name (what it is and why) and a normaliser that makes our record equal to
/// Debezium's where, and only where, the difference is exactly that one; true when it
/// changed something.
pub type Rule = (&'static str, fn(&mut Pair) -> bool);

/// The records of a capture file (one JSON object a line: `destination`, `key`, `value`):
/// topic → records in order, without the topics in `skipped`.
pub fn golden(text: &str, skipped: &[&str]) -> BTreeMap<String, Vec<Record>> {
    let mut m: BTreeMap<String, Vec<Record>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let r: Json = serde_json::from_str(line).unwrap();
        let topic = r["destination"].as_str().unwrap().to_string();
        if skipped.contains(&topic.as_str()) {
            continue;
        }
        let opt = |v: &Json| (!v.is_null()).then(|| v.clone());
        m.entry(topic).or_default().push(Record {
            key: opt(&r["key"]),
            value: opt(&r["value"]),
            headers: Vec::new(),
        });
    }
    m
}

/// One record read back from an embedded log: partition, offset, key and value as JSON
/// (value `None` = tombstone), headers as (key, value as UTF-8 text, lossy) in order.
#[derive(Clone, Debug)]
pub struct LogRecord {
    pub partition: u32,
    pub offset: u64,
    pub key: Option<Json>,
    pub value: Option<Json>,
    pub headers: Vec<(String, String)>,
}

/// Every durable record of `topic` in the log at `log_dir`, per partition in offset order;
/// none while the log or topic does not exist.
pub fn read_log(log_dir: &Path, topic: &str) -> Vec<LogRecord> {
    let Ok(log) = Log::open_read_only(log_dir) else {
        return Vec::new();
    };
    if !log.topics().iter().any(|t| t == topic) {
        return Vec::new();
    }
    let parts = log.describe(topic).unwrap().partitions.len() as u32;
    let mut out = Vec::new();
    for p in 0..parts {
        let mut r = log.reader(topic, p, StartAt::Earliest).unwrap();
        loop {
            let batch = r.poll(4 << 20).unwrap();
            if batch.is_empty() {
                break;
            }
            for rec in batch {
                out.push(LogRecord {
                    partition: p,
                    offset: rec.offset,
                    key: rec.key.map(|k| serde_json::from_slice(&k).unwrap()),
                    value: rec.value.map(|v| serde_json::from_slice(&v).unwrap()),
                    headers: rec
                        .headers
                        .iter()
                        .map(|h| {
                            let v = h.value.as_deref().unwrap_or_default();
                            (h.key.clone(), String::from_utf8_lossy(v).into_owned())
                        })
                        .collect(),
                });
            }
        }
    }
    out
}

/// Our records of `topic` in the log at `log_dir` (the golden configs write one partition),
/// in offset order, as [`Record`]s.
pub fn read_topic(log_dir: &Path, topic: &str) -> Vec<Record> {
    read_log(log_dir, topic)
        .into_iter()
        .map(|r| Record {
            key: r.key,
            value: r.value,
            headers: r.headers,
        })
        .collect()
}

/// Our `cdc.unrepresentable.*` headers as (topic, op, row id, header key, header value),
/// sorted; the row id is `id` of `after` (of `before` for a delete), -1 without one.
pub fn hidden_headers(
    got: &BTreeMap<String, Vec<Record>>,
) -> Vec<(String, String, i64, String, String)> {
    let mut seen = Vec::new();
    for (topic, recs) in got {
        for r in recs {
            let Some(v) = &r.value else { continue };
            let p = &v["payload"];
            let row = if p["after"].is_null() {
                &p["before"]
            } else {
                &p["after"]
            };
            let id = row["id"].as_i64().unwrap_or(-1);
            let op = p["op"].as_str().unwrap_or_default().to_string();
            for (k, hv) in &r.headers {
                if k.starts_with("cdc.unrepresentable.") {
                    seen.push((topic.clone(), op.clone(), id, k.clone(), hv.clone()));
                }
            }
        }
    }
    seen.sort();
    seen
}

/// Every difference between `want` (Debezium) and `got` (ours) under `path`. With
/// `float_tolerance`, numbers of which one is a float compare to 1e-15 relative.
pub fn diff(path: &str, want: &Json, got: &Json, float_tolerance: bool, out: &mut Vec<String>) {
    let d =
        |p: &str, a: &Json, b: &Json, out: &mut Vec<String>| diff(p, a, b, float_tolerance, out);
    match (want, got) {
        (Json::Object(a), Json::Object(b)) => {
            for (k, va) in a {
                let p = format!("{path}.{k}");
                match b.get(k) {
                    Some(vb) => d(&p, va, vb, out),
                    None => out.push(format!("{p}: missing in ours (Debezium {va})")),
                }
            }
            for (k, vb) in b {
                if !a.contains_key(k) {
                    out.push(format!("{path}.{k}: only in ours ({vb})"));
                }
            }
            let (ka, kb): (Vec<_>, Vec<_>) = (a.keys().collect(), b.keys().collect());
            if ka != kb && a.len() == b.len() {
                out.push(format!("{path}: key order {ka:?}, ours {kb:?}"));
            }
        }
        // A struct schema's fields: by name, then their order.
        (Json::Array(a), Json::Array(b)) if a.iter().chain(b).all(|f| f.get("field").is_some()) => {
            let name = |f: &Json| f["field"].as_str().unwrap_or_default().to_string();
            for fa in a {
                match b.iter().find(|fb| name(fb) == name(fa)) {
                    Some(fb) => d(&format!("{path}[{}]", name(fa)), fa, fb, out),
                    None => out.push(format!("{path}[{}]: missing in ours", name(fa))),
                }
            }
            for fb in b {
                if !a.iter().any(|fa| name(fa) == name(fb)) {
                    out.push(format!("{path}[{}]: only in ours", name(fb)));
                }
            }
            let na: Vec<_> = a.iter().map(name).collect();
            let nb: Vec<_> = b.iter().map(name).collect();
            if na != nb && a.len() == b.len() {
                out.push(format!("{path}: field order {na:?}, ours {nb:?}"));
            }
        }
        (Json::Array(a), Json::Array(b)) if a.len() == b.len() => {
            for (i, (va, vb)) in a.iter().zip(b).enumerate() {
                d(&format!("{path}[{i}]"), va, vb, out);
            }
        }
        _ if want == got => {}
        // serde_json (without `float_roundtrip`) may parse one decimal text to a float one
        // unit in the last place away from another text of the same value (Java's
        // `1.0E-38` vs `1e-38`): floats compare to 1e-15 relative.
        (Json::Number(a), Json::Number(b))
            if float_tolerance
                && (a.is_f64() || b.is_f64())
                && a.as_f64().zip(b.as_f64()).is_some_and(|(x, y)| {
                    x == y || ((x - y) / x.abs().max(y.abs())).abs() < 1e-15
                }) => {}
        _ => out.push(format!("{path}: Debezium {want}, ours {got}")),
    }
}

/// Replaces the non-null values at the dotted `paths` of `v` by `"<volatile>"`.
pub fn volatile(v: &mut Json, paths: &[&str]) {
    for p in paths {
        if let Some(x) = v.pointer_mut(&format!("/{}", p.replace('.', "/"))) {
            if !x.is_null() {
                *x = json!("<volatile>");
            }
        }
    }
}

/// The field `name` of a Connect struct schema.
pub fn field_mut<'a>(schema: &'a mut Json, name: &str) -> Option<&'a mut Json> {
    schema
        .get_mut("fields")?
        .as_array_mut()?
        .iter_mut()
        .find(|f| f["field"] == name)
}

/// The field `name` of a Connect struct schema.
pub fn field<'a>(schema: &'a Json, name: &str) -> Option<&'a Json> {
    schema
        .get("fields")?
        .as_array()?
        .iter()
        .find(|f| f["field"] == name)
}

/// Applies `value` to every column of the `before` / `after` rows (op, row name, column,
/// Debezium's schema of the column, Debezium's value, ours; `None` = the field is absent)
/// and `schema` to every column's schema field; where one says the difference is the
/// deviation, ours becomes Debezium's (or is removed when Debezium has no such field).
/// True when anything changed.
pub fn on_columns(
    p: &mut Pair,
    value: impl Fn(&str, &str, &str, Option<&Json>, Option<&Json>, Option<&Json>) -> bool,
    schema: impl Fn(&str, Option<&Json>, Option<&Json>) -> bool,
) -> bool {
    let (Some(w), Some(g)) = (p.want.value.as_ref(), p.got.value.as_mut()) else {
        return false;
    };
    let op = w["payload"]["op"].as_str().unwrap_or_default().to_string();
    let mut changed = false;
    for row in ["before", "after"] {
        let rows = (
            w["payload"].get(row).and_then(Json::as_object),
            g.get_mut("payload")
                .and_then(|p| p.get_mut(row))
                .and_then(Json::as_object_mut),
        );
        if let (Some(wr), Some(gr)) = rows {
            let cols: Vec<String> = wr.keys().chain(gr.keys()).cloned().collect();
            for c in cols {
                let (wv, gv) = (wr.get(&c), gr.get(&c));
                let cs = field(&w["schema"], row).and_then(|f| field(f, &c));
                if wv != gv && value(&op, row, &c, cs, wv, gv) {
                    match wv {
                        Some(v) => gr.insert(c, v.clone()),
                        None => gr.remove(&c),
                    };
                    changed = true;
                }
            }
        }
        let (Some(ws), Some(gs)) = (field(&w["schema"], row), field_mut(&mut g["schema"], row))
        else {
            continue;
        };
        let names: Vec<String> = ws["fields"]
            .as_array()
            .into_iter()
            .chain(gs["fields"].as_array())
            .flatten()
            .filter_map(|f| f["field"].as_str().map(String::from))
            .collect();
        for c in names {
            let (wf, gf) = (field(ws, &c).cloned(), field(gs, &c).cloned());
            if wf != gf && schema(&c, wf.as_ref(), gf.as_ref()) {
                let fields = gs["fields"].as_array_mut().unwrap();
                let at = fields.iter().position(|f| f["field"] == c.as_str());
                match (wf, at) {
                    (Some(wf), Some(i)) => fields[i] = wf,
                    (None, Some(i)) => {
                        fields.remove(i);
                    }
                    _ => continue,
                }
                changed = true;
            }
        }
    }
    changed
}

/// The differences found so far and how often each rule applied; [`Comparison::finish`]
/// fails the test with all of them.
pub struct Comparison {
    volatile: &'static [&'static str],
    float_tolerance: bool,
    /// difference → indexes of the records (in their topic) that show it
    failures: BTreeMap<String, Vec<usize>>,
    hits: BTreeMap<&'static str, usize>,
    /// The first difference in capture, topic and record order.
    first: Option<String>,
}

impl Comparison {
    /// A comparison that blanks the `volatile` paths of both value payloads (values that
    /// must differ between two runs or two products; both sides must carry the field).
    pub fn new(volatile: &'static [&'static str]) -> Self {
        Comparison {
            volatile,
            float_tolerance: false,
            failures: BTreeMap::new(),
            hits: BTreeMap::new(),
            first: None,
        }
    }

    /// Floats compare to 1e-15 relative (see [`diff`]).
    pub fn float_tolerance(mut self) -> Self {
        self.float_tolerance = true;
        self
    }

    /// A difference that belongs to no record (a count, a header check).
    pub fn fail(&mut self, what: String) {
        self.failures.insert(what, vec![]);
    }

    /// Counts `n` applications of the rule `name` (rules applied outside
    /// [`Comparison::topic`], such as records left out before pairing).
    pub fn hit(&mut self, name: &'static str, n: usize) {
        *self.hits.entry(name).or_default() += n;
    }

    /// Pairs Debezium's records of `topic` with ours in order, applies `rules` to each pair
    /// (in order) and notes every difference left, under `[capture] topic`.
    pub fn topic(
        &mut self,
        capture: &str,
        topic: &str,
        want: &[Record],
        got: &mut [Record],
        rules: &[Rule],
    ) {
        if got.len() != want.len() {
            self.fail(format!(
                "[{capture}] {topic}: Debezium {} records, ours {}",
                want.len(),
                got.len()
            ));
        }
        for (i, (wr, gr)) in want.iter().zip(got.iter_mut()).enumerate() {
            let mut wr = wr.clone();
            for v in [&mut wr.value, &mut gr.value].into_iter().flatten() {
                volatile(&mut v["payload"], self.volatile);
            }
            let mut pair = Pair {
                want: &mut wr,
                got: gr,
            };
            for (name, rule) in rules {
                if rule(&mut pair) {
                    self.hit(name, 1);
                }
            }
            let mut out = Vec::new();
            for (what, a, b) in [("key", &wr.key, &gr.key), ("value", &wr.value, &gr.value)] {
                match (a, b) {
                    (Some(a), Some(b)) => diff(what, a, b, self.float_tolerance, &mut out),
                    (None, None) => {}
                    (a, b) => out.push(format!(
                        "{what}: Debezium {}, ours {}",
                        a.as_ref().map_or("null".into(), |j| j.to_string()),
                        b.as_ref().map_or("null".into(), |j| j.to_string())
                    )),
                }
            }
            if self.first.is_none() {
                self.first = out
                    .first()
                    .map(|o| format!("[{capture}] {topic} record {i}: {o}"));
            }
            for o in out {
                self.failures
                    .entry(format!("[{capture}] {topic}: {o}"))
                    .or_default()
                    .push(i);
            }
        }
    }

    /// Fails the test with every difference, and with every rule of `rules` (names) that
    /// never applied (stale: the difference it accepts is gone).
    pub fn finish<'a>(mut self, rules: impl IntoIterator<Item = &'a str>, started: Instant) {
        for name in rules {
            if !self.hits.contains_key(name) {
                self.fail(format!("rule never matched (stale? remove it): {name}"));
            }
        }
        eprintln!(
            "golden test: {:?}; rules applied: {:#?}",
            started.elapsed(),
            self.hits
        );
        let report: Vec<String> = self
            .failures
            .iter()
            .map(|(f, recs)| {
                let mut f: String = f.chars().take(600).collect();
                if !recs.is_empty() {
                    f.push_str(&format!("  (records {recs:?})"));
                }
                f
            })
            .collect();
        assert!(
            self.failures.is_empty(),
            "{} differences from Debezium; first: {}\nall:\n{}",
            self.failures.len(),
            self.first
                .as_deref()
                .unwrap_or("(record counts or rules, below)"),
            report.join("\n")
        );
    }
}
