//! Column definitions: a column's name, type and attributes as a CREATE or ALTER
//! statement writes them, resolved into the [`MyColumn`] the server would print.
//!
//! Invariants: PRIMARY KEY and SERIAL columns are NOT NULL; with
//! `explicit_defaults_for_timestamp = OFF` TIMESTAMP columns follow the legacy rules
//! (NOT NULL unless declared NULL, the first one defaulting to the current time).

use super::default::{default_value, DefaultValue};
use super::lex::{Tok, K};
use super::parse::P;
use super::render::{default_text, implicit_default, resolve_type, TypeInfo};
use crate::mysql::schema::{normalize_charset, Flavor, Schemas};
use crate::mysql::table::{MyColumn, MyTable};

pub(super) struct ColDef {
    pub(super) column: MyColumn,
    /// A legacy TIMESTAMP (see [`promote_first_timestamp`]) declared NOT NULL without a
    /// default or ON UPDATE.
    pub(super) promotable: bool,
    /// Inline PRIMARY KEY (or bare KEY).
    pub(super) primary: bool,
}

/// The parsed type of a column, before printing.
#[derive(Clone, Debug, Default)]
pub(super) struct TypeSpec {
    /// Canonical `DATA_TYPE` before charset effects (`int`, `varchar`, `text`, …).
    pub(super) base: String,
    pub(super) len: Option<u64>,
    pub(super) scale: Option<u64>,
    pub(super) values: Vec<String>,
    pub(super) unsigned: bool,
    pub(super) zerofill: bool,
    pub(super) charset: Option<String>,
    pub(super) collate: Option<String>,
    /// `bool`: `tinyint(1)`.
    pub(super) boolean: bool,
    pub(super) serial: bool,
    pub(super) json: bool,
    /// An explicit `(n)` on an integer type.
    pub(super) width_given: bool,
}

/// How the server reads column definitions.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dialect {
    pub(super) flavor: Flavor,
    /// `explicit_defaults_for_timestamp = OFF`.
    pub(super) legacy_ts: bool,
}

impl Schemas {
    pub(super) fn dialect(&self) -> Dialect {
        Dialect {
            flavor: self.flavor,
            legacy_ts: self.legacy_timestamps,
        }
    }
}

/// With `explicit_defaults_for_timestamp = OFF`, the table's first TIMESTAMP column, when
/// this statement defined it NOT NULL without a default or ON UPDATE, defaults to the
/// current time (the others got the zero timestamp in [`column_def`]).
pub(super) fn promote_first_timestamp(t: &mut MyTable, promotable: &[String], flavor: Flavor) {
    let Some(c) = t.columns.iter_mut().find(|c| c.data_type == "timestamp") else {
        return;
    };
    if promotable.iter().any(|n| n.eq_ignore_ascii_case(&c.name)) {
        let fsp = TypeInfo::of(c).scale;
        c.default = default_text(
            flavor,
            &TypeInfo::of(c),
            DefaultValue::Now((fsp > 0).then_some(fsp)),
            false,
        );
    }
}

pub(super) fn column_def(
    p: &mut P,
    dialect: Dialect,
    table_cs: Option<&str>,
) -> Result<ColDef, String> {
    let flavor = dialect.flavor;
    let name = p.ident()?;
    let mut spec = type_spec(p)?;
    let mut nullable: Option<bool> = None;
    let mut default: Option<DefaultValue> = None;
    let mut primary = false;
    let mut generated = false;
    let mut auto_increment = spec.serial;
    let mut on_update = false;
    loop {
        if p.done() || p.is_sym(",") || p.is_sym(")") {
            break;
        }
        if p.eat_kw("UNSIGNED") {
            spec.unsigned = true;
        } else if p.eat_kw("SIGNED") {
        } else if p.eat_kw("ZEROFILL") {
            spec.zerofill = true;
            spec.unsigned = true;
        } else if p.eat_kws(&["CHARACTER", "SET"]) || p.eat_kw("CHARSET") {
            spec.charset = Some(normalize_charset(&p.value()?));
        } else if p.eat_kw("COLLATE") {
            spec.collate = Some(p.value()?.to_ascii_lowercase());
        } else if p.eat_kw("ASCII") {
            spec.charset = Some("latin1".into());
        } else if p.eat_kw("UNICODE") {
            spec.charset = Some("ucs2".into());
        } else if p.eat_kw("BINARY") || p.eat_kw("BYTE") {
            // A `_bin` collation of the charset (not the binary charset).
        } else if p.eat_kws(&["NOT", "NULL"]) {
            nullable = Some(false);
        } else if p.eat_kw("NULL") {
            nullable = Some(true);
        } else if p.eat_kws(&["SERIAL", "DEFAULT", "VALUE"]) {
            // = NOT NULL AUTO_INCREMENT UNIQUE
            nullable = Some(false);
            auto_increment = true;
        } else if p.eat_kw("DEFAULT") {
            default = Some(default_value(p)?);
        } else if p.eat_kw("AUTO_INCREMENT") {
            auto_increment = true;
        } else if p.eat_kws(&["PRIMARY", "KEY"]) {
            primary = true;
        } else if p.eat_kw("UNIQUE") {
            p.eat_kw("KEY");
        } else if p.eat_kw("KEY") {
            primary = true;
        } else if p.eat_kw("COMMENT") || p.eat_kw("COLUMN_FORMAT") || p.eat_kw("STORAGE") {
            p.value()?;
        } else if p.eat_kws(&["GENERATED", "ALWAYS"]) || p.is_kw("AS") {
            p.expect_kw("AS")?;
            if !p.is_sym("(") {
                return Err("a generated column without its (expression)".into());
            }
            p.skip_group();
            generated = true;
        } else if p.eat_kw("VIRTUAL") || p.eat_kw("STORED") || p.eat_kw("PERSISTENT") {
        } else if p.eat_kws(&["ON", "UPDATE"]) {
            default_value(p)?; // ON UPDATE CURRENT_TIMESTAMP: not a default
            on_update = true;
        } else if p.eat_kw("CHECK") {
            if !p.is_sym("(") {
                return Err("a CHECK without its (expression)".into());
            }
            p.skip_group();
        } else if p.eat_kw("CONSTRAINT") {
            if !p.is_kw("CHECK") {
                p.ident()?;
            }
        } else if p.eat_kw("REFERENCES") {
            p.qname()?;
            if p.is_sym("(") {
                p.skip_group();
            }
            loop {
                if p.eat_kw("MATCH") {
                    p.value()?;
                } else if p.eat_kws(&["ON", "DELETE"]) || p.eat_kws(&["ON", "UPDATE"]) {
                    if !(p.eat_kw("RESTRICT")
                        || p.eat_kw("CASCADE")
                        || p.eat_kws(&["SET", "NULL"])
                        || p.eat_kws(&["SET", "DEFAULT"])
                        || p.eat_kws(&["NO", "ACTION"]))
                    {
                        return Err(format!("REFERENCES … ON: unexpected {}", p.here()));
                    }
                } else {
                    break;
                }
            }
        } else if p.eat_kw("INVISIBLE")
            || p.eat_kw("VISIBLE")
            || p.eat_kws(&["WITH", "SYSTEM", "VERSIONING"])
            || p.eat_kws(&["WITHOUT", "SYSTEM", "VERSIONING"])
        {
        } else if p.eat_kw("SRID") {
            p.value()?;
        } else if p.eat_kw("REF_SYSTEM_ID") {
            // MariaDB's spatial reference id: no effect on the column's values.
            p.eat_eq();
            p.value()?;
        } else if p.eat_kw("COMPRESSED") {
            if p.eat_sym("=") {
                p.value()?;
            }
        } else if p.eat_kw("ENGINE_ATTRIBUTE") || p.eat_kw("SECONDARY_ENGINE_ATTRIBUTE") {
            p.eat_eq();
            p.value()?;
        } else if p.is_kw("FIRST") || p.is_kw("AFTER") {
            break;
        } else {
            return Err(format!("column `{name}`: unexpected {}", p.here()));
        }
    }
    if spec.serial || primary {
        nullable = Some(nullable.unwrap_or(false) && !primary && !spec.serial);
    }
    let info = resolve_type(&spec, flavor, table_cs);
    let legacy_ts = dialect.legacy_ts && info.data_type == "timestamp" && !generated;
    let nullable = if legacy_ts {
        // Legacy TIMESTAMPs are NOT NULL unless declared NULL.
        nullable == Some(true)
    } else {
        nullable.unwrap_or(true)
    };
    let promotable = legacy_ts && !nullable && default.is_none() && !on_update;
    if legacy_ts && !nullable && default.is_none() {
        default = Some(DefaultValue::Str("0000-00-00 00:00:00".into()));
    }
    let default = if auto_increment {
        None
    } else if generated {
        implicit_default(flavor, nullable)
    } else {
        match default {
            Some(d) => default_text(flavor, &info, d, nullable),
            None => implicit_default(flavor, nullable),
        }
    };
    Ok(ColDef {
        column: MyColumn {
            name,
            data_type: info.data_type.clone(),
            column_type: info.column_type.clone(),
            charset: info.charset.clone(),
            nullable,
            default,
            generated,
        },
        primary,
        promotable,
    })
}

/// Reads a type name and its `(…)`.
fn type_spec(p: &mut P) -> Result<TypeSpec, String> {
    let word = match p.peek() {
        Some(t) if t.k == K::Word => t.text.to_ascii_lowercase(),
        _ => return Err(format!("expected a column type {}", p.here())),
    };
    p.i += 1;
    let mut s = TypeSpec::default();
    let base: &str = match word.as_str() {
        "tinyint" | "int1" => "tinyint",
        "smallint" | "int2" => "smallint",
        "mediumint" | "int3" | "middleint" => "mediumint",
        "int" | "integer" | "int4" => "int",
        "bigint" | "int8" => "bigint",
        "bool" | "boolean" => {
            s.boolean = true;
            s.len = Some(1);
            s.width_given = true;
            "tinyint"
        }
        "serial" => {
            s.serial = true;
            s.unsigned = true;
            "bigint"
        }
        "bit" => "bit",
        "decimal" | "dec" | "numeric" | "fixed" => "decimal",
        "float" | "float4" => "float",
        "double" | "float8" => {
            p.eat_kw("PRECISION");
            "double"
        }
        "real" => "double",
        "date" => "date",
        "time" => "time",
        "datetime" => "datetime",
        "timestamp" => "timestamp",
        "year" => "year",
        "char" | "character" => {
            if p.eat_kw("VARYING") {
                "varchar"
            } else if p.eat_kw("BYTE") {
                "binary"
            } else {
                "char"
            }
        }
        "nchar" => {
            s.charset = Some("utf8mb3".into());
            if p.eat_kw("VARCHAR") || p.eat_kw("VARYING") {
                "varchar"
            } else {
                "char"
            }
        }
        "national" => {
            s.charset = Some("utf8mb3".into());
            if p.eat_kw("VARCHAR") {
                "varchar"
            } else if p.eat_kw("CHAR") || p.eat_kw("CHARACTER") {
                if p.eat_kw("VARYING") {
                    "varchar"
                } else {
                    "char"
                }
            } else {
                return Err(format!("NATIONAL: unexpected {}", p.here()));
            }
        }
        "nvarchar" => {
            s.charset = Some("utf8mb3".into());
            "varchar"
        }
        "varchar" | "varcharacter" => "varchar",
        "binary" => "binary",
        "varbinary" => "varbinary",
        "long" => {
            if p.eat_kw("VARBINARY") {
                "mediumblob"
            } else {
                let _ = p.eat_kw("VARCHAR") || p.eat_kw("VARCHARACTER");
                "mediumtext"
            }
        }
        "tinytext" | "text" | "mediumtext" | "longtext" | "tinyblob" | "blob" | "mediumblob"
        | "longblob" | "enum" | "set" | "geometry" | "point" | "linestring" | "polygon"
        | "multipoint" | "multilinestring" | "multipolygon" | "geometrycollection" | "uuid"
        | "inet4" | "inet6" => word.as_str(),
        "geomcollection" => "geometrycollection",
        "json" => {
            s.json = true;
            "json"
        }
        other => return Err(format!("the column type `{other}` is not known")),
    };
    s.base = base.to_string();
    if p.is_sym("(") {
        let inner = p.skip_group();
        if base == "enum" || base == "set" {
            for t in inner {
                match t.k {
                    K::Str => s.values.push(t.text.clone()),
                    K::Sym if t.text == "," => {}
                    _ => return Err(format!("{base}(…): unexpected `{}`", t.text)),
                }
            }
        } else {
            let nums: Vec<&Tok> = inner.iter().filter(|t| t.k != K::Sym).collect();
            let num = |t: &Tok| {
                t.text
                    .parse::<u64>()
                    .map_err(|_| format!("{base}(…): `{}` is not a length", t.text))
            };
            if let Some(t) = nums.first() {
                s.len = Some(num(t)?);
                s.width_given = true;
            }
            if let Some(t) = nums.get(1) {
                s.scale = Some(num(t)?);
            }
        }
    }
    if s.base == "float" && s.scale.is_none() {
        // FLOAT(p): the precision in bits picks FLOAT or DOUBLE, and is not printed.
        if let Some(prec) = s.len.take() {
            if prec > 24 {
                s.base = "double".into();
            }
        }
    }
    Ok(s)
}
