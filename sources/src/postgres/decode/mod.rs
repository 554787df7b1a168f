//! Value decoding: the one table of Postgres' built-in types, and the mapping of every
//! column type (built in or described by the catalog) to the data model.
//!
//! [`BUILTIN_TYPES`] lists each supported built-in type once: its OID and its array
//! type's OID, its name, how its text form is parsed ([`ValueKind`], see [`text`]), how
//! its COPY binary form is decoded ([`BinKind`], see [`binary`]; `None`: read as text
//! only) and which [`ColumnType`] it becomes ([`Model`], refined by the typmod). Every
//! other per-type list is derived from it: the OID index behind [`builtin_scalar`] and
//! [`builtin_array_element`], [`map_type`] (each column's type and value kind, for the
//! relation cache) and [`copy::binary_plan`] (the snapshot's choice of COPY format).
//!
//! Types that are not built in (enums, domains, composites, arrays of those, extension
//! types) come from the catalog as [`PgTypeInfo`] and are mapped by [`map_type`] too; a
//! type nobody can describe passes as text ([`ColumnType::Unknown`]).
//!
//! Submodules: [`text`] parses the text output format (pgoutput tuples, COPY text),
//! [`binary`] the binary send format, [`copy`] the framing of `COPY … TO STDOUT` data.
//!
//! Invariants:
//! - no other file of the Postgres source names a built-in type's OID (tests aside);
//! - every OID (type or array type) is in the table at most once, and below
//!   [`OID_INDEX_LEN`]: both are checked at compile time, where the index is built;
//! - a column's kind is resolved once per relation ([`map_type`], [`copy::binary_plan`]):
//!   per row, decoding only dispatches on it, and a lookup here is an array index;
//! - where a type has a binary decoder, it gives the same [`Value`](cdc_schemas::Value)
//!   as the text parser for the same value.

pub mod binary;
pub mod copy;
pub mod text;

use cdc_schemas::ColumnType;

pub use binary::{decode_binary, BinKind};
pub use text::{parse_str, parse_value, ValueError, ValueKind};

/// Which [`ColumnType`] a built-in type becomes; the typmod supplies the length,
/// precision or scale where the type has one (and the source type name shows it:
/// `varchar(255)`, `numeric(10,2)`, `timestamptz(3)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    Bool,
    Int16,
    Int32,
    Int64,
    Float32,
    Float64,
    /// `numeric(p,s)` → precision and scale (a negative scale has none).
    Decimal,
    /// No length limit (`text`, `name`, `"char"`).
    Text,
    /// The typmod is a length (`varchar(n)`, `char(n)`).
    BoundedText,
    Bytes,
    Json,
    Uuid,
    Date,
    /// The typmod is the fractional-second precision, for these four.
    Time,
    TimeTz,
    Timestamp,
    TimestampTz,
    Interval,
    /// The typmod is the bit count.
    Bits {
        varying: bool,
    },
    /// Passed as text, typed by its Postgres name (inet, money, xml, …).
    TextLike,
}

/// One built-in type: a row of [`BUILTIN_TYPES`].
#[derive(Debug)]
pub struct BuiltinType {
    pub oid: u32,
    /// The OID of the type's array type (`_name`, shown as `name[]`).
    pub array_oid: u32,
    pub name: &'static str,
    /// How the text form is parsed (pgoutput, COPY text).
    pub text: ValueKind,
    /// How the COPY binary form is decoded; `None`: tables with such a column are read
    /// in text format.
    pub binary: Option<BinKind>,
    pub model: Model,
}

const fn ty(
    oid: u32,
    array_oid: u32,
    name: &'static str,
    text: ValueKind,
    binary: Option<BinKind>,
    model: Model,
) -> BuiltinType {
    BuiltinType {
        oid,
        array_oid,
        name,
        text,
        binary,
        model,
    }
}

use BinKind as B;
use Model as M;
use ValueKind as K;

/// Every built-in type the connector maps without the catalog. The only list of them.
#[rustfmt::skip]
pub static BUILTIN_TYPES: [BuiltinType; 33] = [
    //  OID  array  name           text            binary                 model
    ty(  16, 1000, "bool",        K::Bool,        Some(B::Bool),        M::Bool),
    ty(  17, 1001, "bytea",       K::Bytea,       Some(B::Bytea),       M::Bytes),
    // "char" (one byte, not necessarily UTF-8 in binary): text only.
    ty(  18, 1002, "char",        K::Text,        None,                 M::Text),
    ty(  19, 1003, "name",        K::Text,        Some(B::Text),        M::Text),
    ty(  20, 1016, "int8",        K::Int64,       Some(B::Int8),        M::Int64),
    ty(  21, 1005, "int2",        K::Int16,       Some(B::Int2),        M::Int16),
    ty(  23, 1007, "int4",        K::Int32,       Some(B::Int4),        M::Int32),
    ty(  25, 1009, "text",        K::Text,        Some(B::Text),        M::Text),
    // oid and xid: unsigned 32-bit, widened.
    ty(  26, 1028, "oid",         K::Int64,       None,                 M::Int64),
    ty(  28, 1011, "xid",         K::Int64,       None,                 M::Int64),
    ty( 114,  199, "json",        K::Json,        Some(B::Json),        M::Json),
    ty( 142,  143, "xml",         K::Text,        None,                 M::TextLike),
    ty( 650,  651, "cidr",        K::Text,        None,                 M::TextLike),
    ty( 700, 1021, "float4",      K::Float32,     Some(B::Float4),      M::Float32),
    ty( 701, 1022, "float8",      K::Float64,     Some(B::Float8),      M::Float64),
    ty( 774,  775, "macaddr8",    K::Text,        None,                 M::TextLike),
    ty( 790,  791, "money",       K::Text,        None,                 M::TextLike),
    ty( 829, 1040, "macaddr",     K::Text,        None,                 M::TextLike),
    ty( 869, 1041, "inet",        K::Text,        None,                 M::TextLike),
    ty(1042, 1014, "bpchar",      K::Text,        Some(B::Text),        M::BoundedText),
    ty(1043, 1015, "varchar",     K::Text,        Some(B::Text),        M::BoundedText),
    ty(1082, 1182, "date",        K::Date,        Some(B::Date),        M::Date),
    ty(1083, 1183, "time",        K::Time,        Some(B::Time),        M::Time),
    ty(1114, 1115, "timestamp",   K::Timestamp,   Some(B::Timestamp),   M::Timestamp),
    ty(1184, 1185, "timestamptz", K::TimestampTz, Some(B::TimestampTz), M::TimestampTz),
    ty(1186, 1187, "interval",    K::Interval,    Some(B::Interval),    M::Interval),
    ty(1266, 1270, "timetz",      K::TimeTz,      Some(B::TimeTz),      M::TimeTz),
    ty(1560, 1561, "bit",         K::Bits,        Some(B::Bits),        M::Bits { varying: false }),
    ty(1562, 1563, "varbit",      K::Bits,        Some(B::Bits),        M::Bits { varying: true }),
    ty(1700, 1231, "numeric",     K::Numeric,     Some(B::Numeric),     M::Decimal),
    ty(2950, 2951, "uuid",        K::Uuid,        Some(B::Uuid),        M::Uuid),
    ty(3614, 3643, "tsvector",    K::Text,        None,                 M::TextLike),
    ty(3802, 3807, "jsonb",       K::Json,        Some(B::Jsonb),       M::Json),
];

/// Every OID in [`BUILTIN_TYPES`] is below this.
pub const OID_INDEX_LEN: usize = 4096;

/// In [`OID_INDEX`]: the slot is an array type's OID.
const ARRAY_SLOT: u8 = 0x80;

/// OID → 0 (not built in) or the type's position in [`BUILTIN_TYPES`] + 1, with
/// [`ARRAY_SLOT`] set for the array type's OID. Built at compile time.
static OID_INDEX: [u8; OID_INDEX_LEN] = index_oids(&BUILTIN_TYPES);

const fn index_oids(types: &[BuiltinType]) -> [u8; OID_INDEX_LEN] {
    assert!(
        types.len() < ARRAY_SLOT as usize,
        "too many types for a u8 slot"
    );
    let mut index = [0u8; OID_INDEX_LEN];
    let mut i = 0;
    while i < types.len() {
        let (oid, array) = (types[i].oid as usize, types[i].array_oid as usize);
        assert!(
            oid < OID_INDEX_LEN && array < OID_INDEX_LEN,
            "OID beyond the index"
        );
        assert!(index[oid] == 0 && index[array] == 0, "OID listed twice");
        assert!(oid != array, "a type is not its own array type");
        index[oid] = i as u8 + 1;
        index[array] = (i as u8 + 1) | ARRAY_SLOT;
        i += 1;
    }
    index
}

/// The built-in type `oid` is, or whose array type it is (`true`).
fn by_oid(oid: u32) -> Option<(&'static BuiltinType, bool)> {
    let slot = *OID_INDEX.get(usize::try_from(oid).ok()?)?;
    if slot == 0 {
        return None;
    }
    let t = &BUILTIN_TYPES[usize::from(slot & !ARRAY_SLOT) - 1];
    Some((t, slot & ARRAY_SLOT != 0))
}

/// The built-in (non-array) type with OID `oid`.
pub fn builtin_scalar(oid: u32) -> Option<&'static BuiltinType> {
    match by_oid(oid)? {
        (t, false) => Some(t),
        (_, true) => None,
    }
}

/// The element type when `oid` is the array type of a built-in type.
pub fn builtin_array_element(oid: u32) -> Option<&'static BuiltinType> {
    match by_oid(oid)? {
        (t, true) => Some(t),
        (_, false) => None,
    }
}

/// The name of built-in type `oid` (`"array"` for the array types): `Some` when it is
/// mapped without the catalog.
pub fn builtin(oid: u32) -> Option<&'static str> {
    by_oid(oid).map(|(t, array)| if array { "array" } else { t.name })
}

fn precision(typmod: i32) -> Option<u8> {
    (typmod >= 0).then_some(typmod.min(6) as u8)
}

impl Model {
    /// The column type and source type name of built-in type `name` with `typmod`.
    pub fn column_type(self, name: &'static str, typmod: i32) -> (ColumnType, String) {
        let with = |m: String| format!("{name}({m})");
        let plain = |ty: ColumnType| (ty, name.to_string());
        match self {
            M::Bool => plain(ColumnType::Bool),
            M::Int16 => plain(ColumnType::Int16),
            M::Int32 => plain(ColumnType::Int32),
            M::Int64 => plain(ColumnType::Int64),
            M::Float32 => plain(ColumnType::Float32),
            M::Float64 => plain(ColumnType::Float64),
            M::Decimal => {
                if typmod >= 4 {
                    let t = typmod - 4;
                    let p = ((t >> 16) & 0xffff) as u32;
                    // The scale is an 11-bit signed field (negative scales since PG 15).
                    let raw = t & 0x7ff;
                    let s = if raw & 0x400 != 0 { raw - 0x800 } else { raw };
                    (
                        ColumnType::Decimal {
                            precision: Some(p),
                            scale: u32::try_from(s).ok(),
                        },
                        with(format!("{p},{s}")),
                    )
                } else {
                    plain(ColumnType::Decimal {
                        precision: None,
                        scale: None,
                    })
                }
            }
            M::BoundedText => {
                let len = (typmod >= 4).then(|| (typmod - 4) as u32);
                (
                    ColumnType::Text { max_len: len },
                    len.map_or(name.into(), |l| with(l.to_string())),
                )
            }
            M::Text => plain(ColumnType::Text { max_len: None }),
            M::Bytes => plain(ColumnType::Bytes),
            M::Json => plain(ColumnType::Json),
            M::Uuid => plain(ColumnType::Uuid),
            M::Date => plain(ColumnType::Date),
            M::Time | M::TimeTz | M::Timestamp | M::TimestampTz => {
                let p = precision(typmod);
                let src = p.map_or(name.into(), |p| with(p.to_string()));
                let ty = match self {
                    M::Time => ColumnType::Time { precision: p },
                    M::TimeTz => ColumnType::TimeTz { precision: p },
                    M::Timestamp => ColumnType::Timestamp { precision: p },
                    _ => ColumnType::TimestampTz { precision: p },
                };
                (ty, src)
            }
            M::Interval => plain(ColumnType::Interval),
            M::Bits { varying } => {
                let len = (typmod >= 0).then_some(typmod as u32);
                (
                    ColumnType::Bits { len, varying },
                    len.map_or(name.into(), |l| with(l.to_string())),
                )
            }
            M::TextLike => plain(ColumnType::TextLike { name: name.into() }),
        }
    }
}

/// What the catalog says about a type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgTypeInfo {
    pub oid: u32,
    pub namespace: String,
    pub name: String,
    pub kind: PgTypeKind,
}

/// The kinds of non-built-in type the mapping understands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PgTypeKind {
    /// An enum and its labels in sort order.
    Enum { labels: Vec<String> },
    /// A domain over `base_oid` (with the base's typmod).
    Domain { base_oid: u32, base_typmod: i32 },
    /// A composite type's attributes (name, type OID, typmod), in order.
    Composite { attributes: Vec<(String, u32, i32)> },
    /// An array of `element_oid` (`delimiter` is the element type's `typdelim`).
    Array { element_oid: u32, delimiter: u8 },
    /// Anything else (base types of extensions, ranges, …): passed as text.
    Other,
}

/// The logical type, source type name and value kind of a type with a typmod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedType {
    pub ty: ColumnType,
    pub source_type: String,
    pub kind: ValueKind,
    /// False when the type is unknown and values pass as text.
    pub known: bool,
}

/// Maps a type by OID and typmod, asking `lookup` for non-built-in types.
pub fn map_type(oid: u32, typmod: i32, lookup: &dyn Fn(u32) -> Option<PgTypeInfo>) -> MappedType {
    map_type_depth(oid, typmod, lookup, 0)
}

fn unknown(name: String) -> MappedType {
    MappedType {
        ty: ColumnType::Unknown { name: name.clone() },
        source_type: name,
        kind: ValueKind::Text,
        known: false,
    }
}

fn map_type_depth(
    oid: u32,
    typmod: i32,
    lookup: &dyn Fn(u32) -> Option<PgTypeInfo>,
    depth: u32,
) -> MappedType {
    if depth > 16 {
        return unknown(format!("type {oid}"));
    }
    if let Some(t) = builtin_scalar(oid) {
        let (ty, source_type) = t.model.column_type(t.name, typmod);
        return MappedType {
            ty,
            source_type,
            kind: t.text.clone(),
            known: true,
        };
    }
    // Every built-in array type's element delimiter is ','.
    let array_elem = builtin_array_element(oid).map(|e| (e.oid, b','));
    let info = if array_elem.is_none() {
        lookup(oid)
    } else {
        None
    };
    let array_elem = array_elem.or(match &info {
        Some(PgTypeInfo {
            kind:
                PgTypeKind::Array {
                    element_oid,
                    delimiter,
                },
            ..
        }) => Some((*element_oid, *delimiter)),
        _ => None,
    });
    if let Some((elem, delim)) = array_elem {
        let e = map_type_depth(elem, typmod, lookup, depth + 1);
        return MappedType {
            ty: ColumnType::Array(Box::new(e.ty)),
            source_type: format!("{}[]", e.source_type),
            kind: ValueKind::Array(Box::new(e.kind), delim),
            known: e.known,
        };
    }
    let Some(info) = info else {
        return unknown(format!("type {oid}"));
    };
    let qualified = if info.namespace.is_empty() || info.namespace == "public" {
        info.name.clone()
    } else {
        format!("{}.{}", info.namespace, info.name)
    };
    match info.kind {
        PgTypeKind::Enum { labels } => MappedType {
            ty: ColumnType::Enum {
                name: qualified.clone(),
                symbols: labels,
            },
            source_type: qualified,
            kind: ValueKind::Text,
            known: true,
        },
        PgTypeKind::Domain {
            base_oid,
            base_typmod,
        } => {
            let m = map_type_depth(base_oid, base_typmod, lookup, depth + 1);
            MappedType {
                source_type: qualified,
                ..m
            }
        }
        PgTypeKind::Composite { attributes } => {
            let attrs = attributes
                .into_iter()
                .map(|(n, t, m)| (n, map_type_depth(t, m, lookup, depth + 1).kind))
                .collect();
            MappedType {
                ty: ColumnType::Composite {
                    name: qualified.clone(),
                },
                source_type: qualified,
                kind: ValueKind::Composite(attrs),
                known: true,
            }
        }
        PgTypeKind::Array { .. } | PgTypeKind::Other => unknown(qualified),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: u32) -> Option<PgTypeInfo> {
        None
    }

    #[test]
    fn builtin_types_with_typmods() {
        let m = map_type(1043, 259, &none);
        assert_eq!(m.ty, ColumnType::Text { max_len: Some(255) });
        assert_eq!(m.source_type, "varchar(255)");
        let m = map_type(1700, ((10 << 16) | 2) + 4, &none);
        assert_eq!(
            m.ty,
            ColumnType::Decimal {
                precision: Some(10),
                scale: Some(2)
            }
        );
        assert_eq!(m.source_type, "numeric(10,2)");
        // numeric(3,-2) (PG 15+): negative scale.
        let m = map_type(1700, ((3 << 16) | (0x800 - 2)) + 4, &none);
        assert_eq!(m.source_type, "numeric(3,-2)");
        let m = map_type(1184, 3, &none);
        assert_eq!(m.ty, ColumnType::TimestampTz { precision: Some(3) });
        let m = map_type(1185, -1, &none);
        assert_eq!(
            m.ty,
            ColumnType::Array(Box::new(ColumnType::TimestampTz { precision: None }))
        );
        assert_eq!(m.source_type, "timestamptz[]");
        assert_eq!(
            m.kind,
            ValueKind::Array(Box::new(ValueKind::TimestampTz), b',')
        );
        let m = map_type(1560, 8, &none);
        assert_eq!(
            m.ty,
            ColumnType::Bits {
                len: Some(8),
                varying: false
            }
        );
        assert_eq!(
            map_type(869, -1, &none).ty,
            ColumnType::TextLike {
                name: "inet".into()
            }
        );
        let m = map_type(99999, -1, &none);
        assert!(!m.known);
        assert!(matches!(m.ty, ColumnType::Unknown { .. }));
    }

    #[test]
    fn catalog_types() {
        let lookup = |oid: u32| -> Option<PgTypeInfo> {
            let t = |name: &str, kind| PgTypeInfo {
                oid,
                namespace: "public".into(),
                name: name.into(),
                kind,
            };
            Some(match oid {
                50000 => t(
                    "mood",
                    PgTypeKind::Enum {
                        labels: vec!["sad".into(), "happy".into()],
                    },
                ),
                50001 => t(
                    "_mood",
                    PgTypeKind::Array {
                        element_oid: 50000,
                        delimiter: b',',
                    },
                ),
                50002 => t(
                    "posint",
                    PgTypeKind::Domain {
                        base_oid: 23,
                        base_typmod: -1,
                    },
                ),
                50003 => t(
                    "pair",
                    PgTypeKind::Composite {
                        attributes: vec![("a".into(), 23, -1), ("b".into(), 25, -1)],
                    },
                ),
                _ => return None,
            })
        };
        let m = map_type(50000, -1, &lookup);
        assert_eq!(
            m.ty,
            ColumnType::Enum {
                name: "mood".into(),
                symbols: vec!["sad".into(), "happy".into()]
            }
        );
        let m = map_type(50001, -1, &lookup);
        assert_eq!(m.source_type, "mood[]");
        let m = map_type(50002, -1, &lookup);
        assert_eq!(
            (m.ty, m.source_type.as_str()),
            (ColumnType::Int32, "posint")
        );
        let m = map_type(50003, -1, &lookup);
        assert_eq!(
            m.ty,
            ColumnType::Composite {
                name: "pair".into()
            }
        );
    }

    #[test]
    fn the_index_finds_every_type_and_nothing_else() {
        for t in &BUILTIN_TYPES {
            assert!(std::ptr::eq(builtin_scalar(t.oid).unwrap(), t));
            assert!(std::ptr::eq(builtin_array_element(t.array_oid).unwrap(), t));
            assert!(builtin_array_element(t.oid).is_none());
            assert!(builtin_scalar(t.array_oid).is_none());
            assert_eq!(builtin(t.oid), Some(t.name));
            assert_eq!(builtin(t.array_oid), Some("array"));
        }
        for oid in [0, 1, 24, 4095, 4096, 77777, u32::MAX] {
            assert_eq!(builtin(oid), None, "{oid}");
        }
    }

    /// The table gives what the three lists it replaced gave (type names and text kinds
    /// by OID, array OIDs, binary decoders by OID).
    #[test]
    fn the_table_matches_the_lists_it_replaced() {
        use BinKind as B;
        use ValueKind as K;
        #[rustfmt::skip]
        let expected: [(u32, u32, &str, K, Option<B>); 33] = [
            (16, 1000, "bool", K::Bool, Some(B::Bool)),
            (17, 1001, "bytea", K::Bytea, Some(B::Bytea)),
            (18, 1002, "char", K::Text, None),
            (19, 1003, "name", K::Text, Some(B::Text)),
            (20, 1016, "int8", K::Int64, Some(B::Int8)),
            (21, 1005, "int2", K::Int16, Some(B::Int2)),
            (23, 1007, "int4", K::Int32, Some(B::Int4)),
            (25, 1009, "text", K::Text, Some(B::Text)),
            (26, 1028, "oid", K::Int64, None),
            (28, 1011, "xid", K::Int64, None),
            (114, 199, "json", K::Json, Some(B::Json)),
            (142, 143, "xml", K::Text, None),
            (650, 651, "cidr", K::Text, None),
            (700, 1021, "float4", K::Float32, Some(B::Float4)),
            (701, 1022, "float8", K::Float64, Some(B::Float8)),
            (774, 775, "macaddr8", K::Text, None),
            (790, 791, "money", K::Text, None),
            (829, 1040, "macaddr", K::Text, None),
            (869, 1041, "inet", K::Text, None),
            (1042, 1014, "bpchar", K::Text, Some(B::Text)),
            (1043, 1015, "varchar", K::Text, Some(B::Text)),
            (1082, 1182, "date", K::Date, Some(B::Date)),
            (1083, 1183, "time", K::Time, Some(B::Time)),
            (1114, 1115, "timestamp", K::Timestamp, Some(B::Timestamp)),
            (1184, 1185, "timestamptz", K::TimestampTz, Some(B::TimestampTz)),
            (1186, 1187, "interval", K::Interval, Some(B::Interval)),
            (1266, 1270, "timetz", K::TimeTz, Some(B::TimeTz)),
            (1560, 1561, "bit", K::Bits, Some(B::Bits)),
            (1562, 1563, "varbit", K::Bits, Some(B::Bits)),
            (1700, 1231, "numeric", K::Numeric, Some(B::Numeric)),
            (2950, 2951, "uuid", K::Uuid, Some(B::Uuid)),
            (3614, 3643, "tsvector", K::Text, None),
            (3802, 3807, "jsonb", K::Json, Some(B::Jsonb)),
        ];
        for (oid, array_oid, name, text, binary) in expected {
            let t = builtin_scalar(oid).unwrap();
            assert_eq!(
                (t.array_oid, t.name, &t.text, t.binary),
                (array_oid, name, &text, binary)
            );
        }
    }

    #[test]
    fn column_types_of_the_text_like_and_unlimited_types() {
        for (oid, ty) in [
            (25, ColumnType::Text { max_len: None }),
            (1043, ColumnType::Text { max_len: None }),
            (18, ColumnType::Text { max_len: None }),
            (26, ColumnType::Int64),
            (3802, ColumnType::Json),
            (
                3614,
                ColumnType::TextLike {
                    name: "tsvector".into(),
                },
            ),
            (
                1562,
                ColumnType::Bits {
                    len: None,
                    varying: true,
                },
            ),
            (
                1700,
                ColumnType::Decimal {
                    precision: None,
                    scale: None,
                },
            ),
        ] {
            assert_eq!(map_type(oid, -1, &none).ty, ty, "{oid}");
        }
        let m = map_type(1042, 14, &none);
        assert_eq!(
            (m.ty, m.source_type.as_str()),
            (ColumnType::Text { max_len: Some(10) }, "bpchar(10)")
        );
        let m = map_type(1083, 0, &none);
        assert_eq!(
            (m.ty, m.source_type.as_str()),
            (ColumnType::Time { precision: Some(0) }, "time(0)")
        );
    }
}
