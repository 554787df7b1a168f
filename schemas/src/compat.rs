//! Avro schema compatibility: the schema registry's levels, checked with the Avro
//! specification's schema-resolution rules ("Schema Resolution": a reader schema reading
//! data written with a writer schema).
//!
//! Levels (the registry default is [`CompatibilityLevel::Backward`]):
//! - BACKWARD: the new schema (reader) can read data written with the latest previous one;
//! - FORWARD: the latest previous schema (reader) can read data written with the new one;
//! - FULL: both; the `_TRANSITIVE` variants check against every previous version, not
//!   only the latest; NONE checks nothing.
//!
//! Resolution rules implemented (reader R, writer W):
//! - primitives must match, except the promotions int→long/float/double, long→float/double,
//!   float→double, string↔bytes;
//! - records match by unqualified name or a reader alias of the writer's full name; every
//!   reader field must exist in the writer (by name or reader field alias) or have a
//!   default; writer fields the reader lacks are skipped;
//! - enums match by name; every writer symbol must be a reader symbol unless the reader
//!   has an enum default; fixed types match by name and size; arrays and maps by items /
//!   values;
//! - a writer union: every branch must be readable (it could be any of them); a reader
//!   union: the writer's type must match one of its branches; a non-union writer against a
//!   union reader and vice versa follow from those two rules;
//! - logical types are read as their underlying types, as Avro does, with one stricter
//!   rule: two `decimal`s with different scales are incompatible (the same bytes would
//!   mean a different number). A precision change alone is accepted, as Confluent's
//!   registry (which uses Avro's resolution rules) accepts it.
//!
//! Recursive named types are checked co-inductively: a (writer, reader) record pair that
//! is already being checked further up the path is assumed compatible, so checking ends.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

use apache_avro::schema::{Name, RecordSchema};
use apache_avro::Schema;

/// A subject's compatibility level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CompatibilityLevel {
    None,
    #[default]
    Backward,
    BackwardTransitive,
    Forward,
    ForwardTransitive,
    Full,
    FullTransitive,
}

impl CompatibilityLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            CompatibilityLevel::None => "NONE",
            CompatibilityLevel::Backward => "BACKWARD",
            CompatibilityLevel::BackwardTransitive => "BACKWARD_TRANSITIVE",
            CompatibilityLevel::Forward => "FORWARD",
            CompatibilityLevel::ForwardTransitive => "FORWARD_TRANSITIVE",
            CompatibilityLevel::Full => "FULL",
            CompatibilityLevel::FullTransitive => "FULL_TRANSITIVE",
        }
    }

    fn backward(self) -> bool {
        matches!(
            self,
            Self::Backward | Self::BackwardTransitive | Self::Full | Self::FullTransitive
        )
    }

    fn forward(self) -> bool {
        matches!(
            self,
            Self::Forward | Self::ForwardTransitive | Self::Full | Self::FullTransitive
        )
    }

    fn transitive(self) -> bool {
        matches!(
            self,
            Self::BackwardTransitive | Self::ForwardTransitive | Self::FullTransitive
        )
    }
}

impl fmt::Display for CompatibilityLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not a compatibility level.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "unknown compatibility level {0:?}: expected NONE, BACKWARD, BACKWARD_TRANSITIVE, \
     FORWARD, FORWARD_TRANSITIVE, FULL or FULL_TRANSITIVE"
)]
pub struct ParseLevelError(pub String);

impl FromStr for CompatibilityLevel {
    type Err = ParseLevelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.trim().to_ascii_uppercase().as_str() {
            "NONE" => Self::None,
            "BACKWARD" => Self::Backward,
            "BACKWARD_TRANSITIVE" => Self::BackwardTransitive,
            "FORWARD" => Self::Forward,
            "FORWARD_TRANSITIVE" => Self::ForwardTransitive,
            "FULL" => Self::Full,
            "FULL_TRANSITIVE" => Self::FullTransitive,
            _ => return Err(ParseLevelError(s.to_string())),
        })
    }
}

/// Which schema is the reader, for the wording of messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// BACKWARD: the new schema reads old data.
    NewReadsOld,
    /// FORWARD: the old schema reads new data.
    OldReadsNew,
}

/// One reason a reader cannot read a writer's data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incompatibility {
    /// Dotted path from the root record: `after.price`, `tags[]`, `attrs{}`, `<root>`.
    pub path: String,
    pub message: String,
}

impl fmt::Display for Incompatibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at `{}`: {}", self.path, self.message)
    }
}

/// A new schema that breaks its subject's compatibility level.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error(
    "schema is incompatible under {level}: {}; make the change compatible (add defaults, \
     keep types) or change the subject's compatibility level",
    .problems.join("; ")
)]
pub struct CompatError {
    pub level: CompatibilityLevel,
    /// Each problem prefixed with the version it conflicts with and the direction.
    pub problems: Vec<String>,
}

/// Checks `new` against the subject's `previous` schemas (oldest first) under `level`.
pub fn check_compatibility(
    level: CompatibilityLevel,
    new: &Schema,
    previous: &[Schema],
) -> Result<(), CompatError> {
    if level == CompatibilityLevel::None || previous.is_empty() {
        return Ok(());
    }
    let n = previous.len();
    let range = if level.transitive() { 0..n } else { n - 1..n };
    let mut problems = Vec::new();
    for i in range {
        let old = &previous[i];
        let version = i + 1;
        if level.backward() {
            for p in can_read(new, old, Direction::NewReadsOld) {
                problems.push(format!(
                    "the new schema cannot read data written with version {version}: {p}"
                ));
            }
        }
        if level.forward() {
            for p in can_read(old, new, Direction::OldReadsNew) {
                problems.push(format!(
                    "version {version} cannot read data written with the new schema: {p}"
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CompatError { level, problems })
    }
}

/// Every reason `reader` cannot read data written with `writer` (empty: it can).
pub fn can_read(reader: &Schema, writer: &Schema, dir: Direction) -> Vec<Incompatibility> {
    let mut c = Checker {
        rnames: HashMap::new(),
        wnames: HashMap::new(),
        active: HashSet::new(),
        dir,
        out: Vec::new(),
    };
    collect_names(reader, &mut c.rnames);
    collect_names(writer, &mut c.wnames);
    c.check(writer, reader, "<root>");
    c.out
}

fn fullname(n: &Name) -> String {
    n.fullname(None)
}

fn collect_names<'a>(s: &'a Schema, names: &mut HashMap<String, &'a Schema>) {
    match s {
        Schema::Record(r) if names.insert(fullname(&r.name), s).is_none() => {
            for f in &r.fields {
                collect_names(&f.schema, names);
            }
        }
        Schema::Enum(e) => {
            names.insert(fullname(&e.name), s);
        }
        Schema::Fixed(f) => {
            names.insert(fullname(&f.name), s);
        }
        Schema::Array(a) => collect_names(&a.items, names),
        Schema::Map(m) => collect_names(&m.types, names),
        Schema::Union(u) => u.variants().iter().for_each(|v| collect_names(v, names)),
        Schema::Decimal(d) => collect_names(&d.inner, names),
        _ => {}
    }
}

/// The resolution-relevant kind of a schema: logical types become their underlying type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Array,
    Map,
    Union,
    Record,
    Enum,
    Fixed,
}

fn kind(s: &Schema) -> Kind {
    match s {
        Schema::Null => Kind::Null,
        Schema::Boolean => Kind::Boolean,
        Schema::Int | Schema::Date | Schema::TimeMillis => Kind::Int,
        Schema::Long
        | Schema::TimeMicros
        | Schema::TimestampMillis
        | Schema::TimestampMicros
        | Schema::TimestampNanos
        | Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos => Kind::Long,
        Schema::Float => Kind::Float,
        Schema::Double => Kind::Double,
        Schema::Bytes | Schema::BigDecimal => Kind::Bytes,
        Schema::String | Schema::Uuid => Kind::String,
        Schema::Array(_) => Kind::Array,
        Schema::Map(_) => Kind::Map,
        Schema::Union(_) => Kind::Union,
        Schema::Record(_) => Kind::Record,
        Schema::Enum(_) => Kind::Enum,
        Schema::Fixed(_) | Schema::Duration => Kind::Fixed,
        Schema::Decimal(d) => kind(&d.inner),
        Schema::Ref { .. } => Kind::Record,
    }
}

fn kind_name(s: &Schema) -> String {
    match s {
        Schema::Record(r) => format!("record {}", fullname(&r.name)),
        Schema::Enum(e) => format!("enum {}", fullname(&e.name)),
        Schema::Fixed(f) => format!("fixed {}({})", fullname(&f.name), f.size),
        Schema::Decimal(d) => format!("decimal({:?},{:?})", d.precision, d.scale),
        Schema::Ref { name } => fullname(name),
        other => format!("{:?}", kind(other)).to_lowercase(),
    }
}

fn promotable(w: Kind, r: Kind) -> bool {
    use Kind::*;
    matches!(
        (w, r),
        (Int, Long | Float | Double)
            | (Long, Float | Double)
            | (Float, Double)
            | (String, Bytes)
            | (Bytes, String)
    )
}

fn named(s: &Schema) -> Option<&Name> {
    match s {
        Schema::Record(r) => Some(&r.name),
        Schema::Enum(e) => Some(&e.name),
        Schema::Fixed(f) => Some(&f.name),
        _ => None,
    }
}

fn aliases(s: &Schema) -> Vec<String> {
    let a = match s {
        Schema::Record(r) => &r.aliases,
        Schema::Enum(e) => &e.aliases,
        Schema::Fixed(f) => &f.aliases,
        _ => return Vec::new(),
    };
    let ns = named(s).and_then(|n| n.namespace.clone());
    a.as_ref()
        .map(|v| v.iter().map(|al| al.fullname(ns.clone())).collect())
        .unwrap_or_default()
}

/// Reader and writer named types match by unqualified name, or by a reader alias equal to
/// the writer's full name (or its unqualified name).
fn names_match(w: &Schema, r: &Schema) -> bool {
    let (Some(wn), Some(rn)) = (named(w), named(r)) else {
        return true;
    };
    wn.name == rn.name
        || aliases(r)
            .iter()
            .any(|a| *a == fullname(wn) || a.rsplit('.').next() == Some(wn.name.as_str()))
}

struct Checker<'a> {
    rnames: HashMap<String, &'a Schema>,
    wnames: HashMap<String, &'a Schema>,
    active: HashSet<(String, String)>,
    dir: Direction,
    out: Vec<Incompatibility>,
}

impl<'a> Checker<'a> {
    fn report(&mut self, path: &str, message: String) {
        self.out.push(Incompatibility {
            path: path.to_string(),
            message,
        });
    }

    fn wording(&self, new_reads_old: String, old_reads_new: String) -> String {
        match self.dir {
            Direction::NewReadsOld => new_reads_old,
            Direction::OldReadsNew => old_reads_new,
        }
    }

    fn deref_r(&self, s: &'a Schema) -> &'a Schema {
        match s {
            Schema::Ref { name } => self.rnames.get(&fullname(name)).copied().unwrap_or(s),
            _ => s,
        }
    }

    fn deref_w(&self, s: &'a Schema) -> &'a Schema {
        match s {
            Schema::Ref { name } => self.wnames.get(&fullname(name)).copied().unwrap_or(s),
            _ => s,
        }
    }

    /// Would Avro pick reader branch `r` for writer type `w` (same kind and name, or a
    /// promotion)?
    fn branch_matches(&self, w: &'a Schema, r: &'a Schema, exact: bool) -> bool {
        let (w, r) = (self.deref_w(w), self.deref_r(r));
        let (kw, kr) = (kind(w), kind(r));
        if kw == kr {
            return match kw {
                Kind::Record | Kind::Enum | Kind::Fixed => names_match(w, r),
                _ => true,
            };
        }
        !exact && promotable(kw, kr)
    }

    fn check(&mut self, w: &'a Schema, r: &'a Schema, path: &str) {
        let (w, r) = (self.deref_w(w), self.deref_r(r));
        if let Schema::Union(wu) = w {
            for wb in wu.variants() {
                if let Schema::Union(ru) = r {
                    let found = ru
                        .variants()
                        .iter()
                        .find(|rb| self.branch_matches(wb, rb, true))
                        .or_else(|| {
                            ru.variants()
                                .iter()
                                .find(|rb| self.branch_matches(wb, rb, false))
                        });
                    match found {
                        Some(rb) => self.check(wb, rb, path),
                        None => {
                            let t = kind_name(self.deref_w(wb));
                            let m = self.wording(
                                format!("union branch `{t}` was removed: old data of that type cannot be read"),
                                format!("union branch `{t}` was added: old readers cannot read new data of that type"),
                            );
                            self.report(path, m);
                        }
                    }
                } else if matches!(self.deref_w(wb), Schema::Null) && !matches!(r, Schema::Null) {
                    let m = self.wording(
                        "the field became non-nullable: old null values cannot be read".to_string(),
                        "the field became nullable: old readers cannot read new null values"
                            .to_string(),
                    );
                    self.report(path, m);
                } else {
                    self.check(wb, r, path);
                }
            }
            return;
        }
        if let Schema::Union(ru) = r {
            let found = ru
                .variants()
                .iter()
                .find(|rb| self.branch_matches(w, rb, true))
                .or_else(|| {
                    ru.variants()
                        .iter()
                        .find(|rb| self.branch_matches(w, rb, false))
                });
            match found {
                Some(rb) => self.check(w, rb, path),
                None => {
                    let m = format!(
                        "type `{}` is not among the reader's union branches",
                        kind_name(w)
                    );
                    self.report(path, m);
                }
            }
            return;
        }
        let (kw, kr) = (kind(w), kind(r));
        if kw != kr {
            if !promotable(kw, kr) {
                let m = format!(
                    "type changed from `{}` (writer) to `{}` (reader), which Avro cannot promote",
                    kind_name(w),
                    kind_name(r)
                );
                self.report(path, m);
            }
            return;
        }
        if let (Schema::Decimal(wd), Schema::Decimal(rd)) = (w, r) {
            if wd.scale != rd.scale {
                let m = format!(
                    "decimal scale changed from {} to {}: the same bytes would mean a different number",
                    wd.scale, rd.scale
                );
                self.report(path, m);
            }
            self.check(&wd.inner, &rd.inner, path);
            return;
        }
        match (w, r) {
            (Schema::Record(wr), Schema::Record(rr)) => self.record(w, wr, r, rr, path),
            (Schema::Enum(we), Schema::Enum(re)) => {
                if !names_match(w, r) {
                    self.renamed(path, &we.name, &re.name);
                    return;
                }
                for s in &we.symbols {
                    if !re.symbols.contains(s) && re.default.is_none() {
                        let m = self.wording(
                            format!("enum symbol `{s}` was removed and the enum has no default: old data using it cannot be read"),
                            format!("enum symbol `{s}` was added and the old enum has no default: old readers cannot read it"),
                        );
                        self.report(path, m);
                    }
                }
            }
            (Schema::Fixed(wf), Schema::Fixed(rf)) => {
                if !names_match(w, r) {
                    self.renamed(path, &wf.name, &rf.name);
                } else if wf.size != rf.size {
                    let m = format!("fixed size changed from {} to {} bytes", wf.size, rf.size);
                    self.report(path, m);
                }
            }
            (Schema::Array(wa), Schema::Array(ra)) => {
                self.check(&wa.items, &ra.items, &format!("{path}[]"))
            }
            (Schema::Map(wm), Schema::Map(rm)) => {
                self.check(&wm.types, &rm.types, &format!("{path}{{}}"))
            }
            _ => {}
        }
    }

    fn renamed(&mut self, path: &str, w: &Name, r: &Name) {
        let m = format!(
            "named type renamed from `{}` to `{}` without a reader alias for the old name",
            fullname(w),
            fullname(r)
        );
        self.report(path, m);
    }

    fn record(
        &mut self,
        w: &'a Schema,
        wr: &'a RecordSchema,
        r: &'a Schema,
        rr: &'a RecordSchema,
        path: &str,
    ) {
        if !names_match(w, r) {
            self.renamed(path, &wr.name, &rr.name);
            return;
        }
        let pair = (fullname(&wr.name), fullname(&rr.name));
        if !self.active.insert(pair.clone()) {
            return; // already being checked higher up: recursive type
        }
        for rf in &rr.fields {
            let wf = wr.fields.iter().find(|wf| wf.name == rf.name).or_else(|| {
                rf.aliases
                    .as_ref()
                    .and_then(|al| wr.fields.iter().find(|wf| al.contains(&wf.name)))
            });
            let fpath = if path == "<root>" {
                rf.name.clone()
            } else {
                format!("{path}.{}", rf.name)
            };
            match wf {
                Some(wf) => self.check(&wf.schema, &rf.schema, &fpath),
                None if rf.default.is_some() => {}
                None => {
                    let name = &rf.name;
                    let m = self.wording(
                        format!("field `{name}` added without a default: old data cannot be read"),
                        format!("field `{name}` removed but it has no default in the old schema: old readers cannot read new data"),
                    );
                    self.report(&fpath, m);
                }
            }
        }
        self.active.remove(&pair);
    }
}
