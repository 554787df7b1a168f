//! The relation cache: what pgoutput's Relation and Type messages and the catalog say
//! about each captured table, and the conversion of its tuples into rows.
//!
//! pgoutput sends a Relation message before the first change of a table in a session
//! (and again after its definition changed), and a Type message for each non-built-in
//! type it refers to. [`RelationCache`] keeps both; for each column it keeps the logical
//! [`ColumnType`](cdc_schemas::ColumnType), the source type name (`varchar(255)`,
//! `numeric(10,2)`, `int4[]`) and the [`ValueKind`] used to parse its text, all from
//! [`map_type`] (the type table and the mapping live in [`super::decode`]).
//!
//! Built-in types are known by OID. Everything else (enums, domains, composites, arrays
//! of those, extension types) needs the catalog: the source implements
//! [`TypeResolver`] (or fills a [`StaticTypeResolver`], e.g. with [`load_types`] from
//! `pg_type`) before the relation is applied; [`RelationCache::unresolved_types`] says
//! which OIDs a Relation message needs. A type nobody can resolve becomes
//! [`ColumnType::Unknown`](cdc_schemas::ColumnType::Unknown) with its values passed as
//! text, and a one-time warning names the column.
//!
//! Invariants: a column's [`ValueKind`] is resolved once, when the relation is applied;
//! [`decode_tuple`] only dispatches on it. The record key is the primary key when the
//! replica identity carries it (see [`TableCatalog`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use cdc_schemas::{Column, Row, TableId, TableSchema, Value};

use super::decode::{parse_value, ValueError, ValueKind};
use super::pgoutput::{Relation, ReplicaIdentity, TupleColumn, TupleData, TypeMessage};

// The type mapping moved to `decode`; these paths stay for the cache's users.
pub use super::decode::{builtin, map_type, MappedType, PgTypeInfo, PgTypeKind};

/// Looks types up by OID (the source fills it from `pg_type`).
pub trait TypeResolver: Send + Sync {
    fn resolve(&self, oid: u32) -> Option<PgTypeInfo>;
}

/// A [`TypeResolver`] over a map the source fills.
#[derive(Default, Debug)]
pub struct StaticTypeResolver {
    types: Mutex<HashMap<u32, PgTypeInfo>>,
}

impl StaticTypeResolver {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&self, t: PgTypeInfo) {
        self.types
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(t.oid, t);
    }
}

impl TypeResolver for StaticTypeResolver {
    fn resolve(&self, oid: u32) -> Option<PgTypeInfo> {
        self.types
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&oid)
            .cloned()
    }
}

/// The catalog query behind [`load_types`]: one row per type with what [`PgTypeInfo`]
/// needs (`$1` is an `oid[]`).
pub const TYPE_CATALOG_QUERY: &str = "
SELECT t.oid, n.nspname, t.typname, t.typtype::text, t.typbasetype, t.typtypmod, t.typelem,
       t.typcategory::text,
       (SELECT e.typdelim::text FROM pg_type e WHERE e.oid = t.typelem) AS elemdelim,
       (SELECT array_agg(enumlabel::text ORDER BY enumsortorder) FROM pg_enum WHERE enumtypid = t.oid) AS labels,
       (SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_attribute a
         WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped) AS attnames,
       (SELECT array_agg(a.atttypid ORDER BY a.attnum) FROM pg_attribute a
         WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped) AS atttypes,
       (SELECT array_agg(a.atttypmod ORDER BY a.attnum) FROM pg_attribute a
         WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped) AS atttypmods
FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE t.oid = ANY($1)";

/// Loads type information for `oids` — and, transitively, for the element, base and
/// attribute types they refer to — from `pg_type` over an ordinary connection.
pub async fn load_types(
    client: &tokio_postgres::Client,
    oids: &[u32],
) -> Result<Vec<PgTypeInfo>, tokio_postgres::Error> {
    let mut out: Vec<PgTypeInfo> = Vec::new();
    let mut seen: HashSet<u32> = HashSet::new();
    let mut todo: Vec<u32> = oids
        .iter()
        .copied()
        .filter(|o| builtin(*o).is_none())
        .collect();
    while !todo.is_empty() {
        todo.retain(|o| seen.insert(*o));
        if todo.is_empty() {
            break;
        }
        let rows = client.query(TYPE_CATALOG_QUERY, &[&todo]).await?;
        todo.clear();
        for row in rows {
            let oid: u32 = row.get(0);
            let typtype: String = row.get(3);
            let category: String = row.get(7);
            let kind = match typtype.as_str() {
                "e" => PgTypeKind::Enum {
                    labels: row.get::<_, Option<Vec<String>>>(9).unwrap_or_default(),
                },
                "d" => PgTypeKind::Domain {
                    base_oid: row.get(4),
                    base_typmod: row.get(5),
                },
                "c" => {
                    let names: Vec<String> =
                        row.get::<_, Option<Vec<String>>>(10).unwrap_or_default();
                    let types: Vec<u32> = row.get::<_, Option<Vec<u32>>>(11).unwrap_or_default();
                    let mods: Vec<i32> = row.get::<_, Option<Vec<i32>>>(12).unwrap_or_default();
                    PgTypeKind::Composite {
                        attributes: names
                            .into_iter()
                            .zip(types)
                            .zip(mods)
                            .map(|((n, t), m)| (n, t, m))
                            .collect(),
                    }
                }
                _ if category == "A" => PgTypeKind::Array {
                    element_oid: row.get(6),
                    delimiter: row
                        .get::<_, Option<String>>(8)
                        .and_then(|d| d.bytes().next())
                        .unwrap_or(b','),
                },
                _ => PgTypeKind::Other,
            };
            match &kind {
                PgTypeKind::Domain { base_oid, .. } => todo.push(*base_oid),
                PgTypeKind::Array { element_oid, .. } => todo.push(*element_oid),
                PgTypeKind::Composite { attributes } => todo.extend(attributes.iter().map(|a| a.1)),
                _ => {}
            }
            out.push(PgTypeInfo {
                oid,
                namespace: row.get(1),
                name: row.get(2),
                kind,
            });
        }
        todo.retain(|o| builtin(*o).is_none());
    }
    Ok(out)
}

/// One column of a cached relation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnInfo {
    pub name: String,
    pub type_oid: u32,
    pub type_modifier: i32,
    /// Part of the replica identity key.
    pub key: bool,
    pub kind: ValueKind,
    pub known_type: bool,
}

/// A table as the latest Relation message described it.
#[derive(Clone, Debug, PartialEq)]
pub struct RelationInfo {
    pub id: u32,
    pub replica_identity: ReplicaIdentity,
    pub columns: Vec<ColumnInfo>,
    /// The connector's schema: key = the primary key or the replica identity's columns
    /// (see [`TableCatalog`]); key columns are not nullable, nor are NOT NULL columns of
    /// tables whose old row images are complete (REPLICA IDENTITY FULL or NOTHING).
    pub schema: Arc<TableSchema>,
}

/// A tuple that does not fit its relation or holds an unparsable value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TupleError {
    #[error("no Relation message was received for relation id {0} (a decoding session always sends one before the first change)")]
    UnknownRelation(u32),
    #[error("table {table}: tuple has {got} columns, the relation has {expected}")]
    ColumnCount {
        table: String,
        expected: usize,
        got: usize,
    },
    #[error("table {table}, column {column}: {error}")]
    Value {
        table: String,
        column: String,
        error: ValueError,
    },
    #[error("table {table}, column {column}: binary column format was not requested")]
    Binary { table: String, column: String },
}

/// What the catalog adds to a Relation message: the primary key and NOT NULL columns.
/// pgoutput describes only the replica identity, which is not what keys the records:
/// as Debezium does, a table's record key is its primary key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableCatalog {
    /// Primary-key column names (empty: no primary key).
    pub primary_key: Vec<String>,
    pub not_null: HashSet<String>,
}

/// The catalog query behind [`load_table_catalog`] (`$1` is the relation's OID).
pub const TABLE_CATALOG_QUERY: &str = "
SELECT a.attname::text, a.attnotnull, coalesce(a.attnum = ANY(i.indkey), false)
FROM pg_attribute a
LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum";

/// Reads the primary key and NOT NULL columns of relation `oid`; `None` when the
/// relation no longer exists (dropped after the change was written).
pub async fn load_table_catalog(
    client: &tokio_postgres::Client,
    oid: u32,
) -> Result<Option<TableCatalog>, tokio_postgres::Error> {
    let rows = client.query(TABLE_CATALOG_QUERY, &[&oid]).await?;
    if rows.is_empty() {
        return Ok(None);
    }
    let mut cat = TableCatalog::default();
    for r in rows {
        let name: String = r.get(0);
        if r.get::<_, bool>(2) {
            cat.primary_key.push(name.clone());
        }
        if r.get::<_, bool>(1) {
            cat.not_null.insert(name);
        }
    }
    Ok(Some(cat))
}

/// The record key of a relation: the primary key when the replica identity carries it
/// (so a key change is seen in the old tuple), else the replica identity's columns;
/// none for REPLICA IDENTITY FULL without a primary key (Debezium's null key).
fn record_key(r: &Relation, cat: Option<&TableCatalog>) -> Vec<usize> {
    let identity: Vec<usize> = (0..r.columns.len())
        .filter(|&i| r.columns[i].key || r.replica_identity == ReplicaIdentity::Full)
        .collect();
    if let Some(cat) = cat.filter(|c| !c.primary_key.is_empty()) {
        let pk: Vec<usize> = (0..r.columns.len())
            .filter(|&i| cat.primary_key.contains(&r.columns[i].name))
            .collect();
        let carried = r.replica_identity == ReplicaIdentity::Nothing
            || pk.iter().all(|i| identity.contains(i));
        if pk.len() == cat.primary_key.len() && carried {
            return pk;
        }
    }
    if r.replica_identity == ReplicaIdentity::Full {
        return Vec::new();
    }
    identity
}

/// Relation id → cached relation; plus types from Type messages and a resolver.
#[derive(Default)]
pub struct RelationCache {
    relations: HashMap<u32, Arc<RelationInfo>>,
    announced: HashMap<u32, TypeMessage>,
    resolver: Option<Arc<dyn TypeResolver>>,
    warned: HashSet<(u32, String)>,
}

impl RelationCache {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_resolver(resolver: Arc<dyn TypeResolver>) -> Self {
        RelationCache {
            resolver: Some(resolver),
            ..Self::default()
        }
    }

    /// Records a Type message (namespace and name of a non-built-in type).
    pub fn apply_type(&mut self, t: &TypeMessage) {
        self.announced.insert(t.oid, t.clone());
    }

    fn lookup(&self, oid: u32) -> Option<PgTypeInfo> {
        if let Some(info) = self.resolver.as_ref().and_then(|r| r.resolve(oid)) {
            return Some(info);
        }
        // Only the name is known from a Type message: values pass as text.
        self.announced.get(&oid).map(|t| PgTypeInfo {
            oid,
            namespace: t.namespace.clone(),
            name: t.name.clone(),
            kind: PgTypeKind::Other,
        })
    }

    /// The column type OIDs of `r` that are neither built in nor known to the resolver:
    /// what the source should load (e.g. with [`load_types`]) before [`Self::apply_relation`].
    pub fn unresolved_types(&self, r: &Relation) -> Vec<u32> {
        let mut v: Vec<u32> = r
            .columns
            .iter()
            .map(|c| c.type_oid)
            .filter(|&o| {
                builtin(o).is_none()
                    && self
                        .resolver
                        .as_ref()
                        .and_then(|res| res.resolve(o))
                        .is_none()
            })
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Applies a Relation message without catalog information: the record key is the
    /// replica identity (see [`Self::apply_relation_with`]).
    pub fn apply_relation(&mut self, r: &Relation) -> Arc<RelationInfo> {
        self.apply_relation_with(r, None)
    }

    /// Applies a Relation message, replacing any earlier definition; `cat` (from
    /// [`load_table_catalog`]) gives the primary key and NOT NULL columns.
    pub fn apply_relation_with(
        &mut self,
        r: &Relation,
        cat: Option<&TableCatalog>,
    ) -> Arc<RelationInfo> {
        let lookup = |oid| self.lookup(oid);
        let mut columns = Vec::with_capacity(r.columns.len());
        let mut schema_cols = Vec::with_capacity(r.columns.len());
        let key = record_key(r, cat);
        // A NOT NULL column is a required field only where every row image carries it:
        // with REPLICA IDENTITY DEFAULT or INDEX the old image of an update or delete holds
        // the identity's columns only, the others arrive as NULL.
        let complete_old_image = matches!(
            r.replica_identity,
            ReplicaIdentity::Full | ReplicaIdentity::Nothing
        );
        let not_null = |name: &str| cat.is_some_and(|t| t.not_null.contains(name));
        for (i, c) in r.columns.iter().enumerate() {
            let m = map_type(c.type_oid, c.type_modifier, &lookup);
            columns.push(ColumnInfo {
                name: c.name.clone(),
                type_oid: c.type_oid,
                type_modifier: c.type_modifier,
                key: c.key,
                kind: m.kind.clone(),
                known_type: m.known,
            });
            let mut col = Column::new(c.name.clone(), m.ty, m.source_type);
            if key.contains(&i) || (complete_old_image && not_null(&c.name)) {
                col = col.not_null();
            }
            schema_cols.push(col);
        }
        let namespace = if r.namespace.is_empty() {
            "pg_catalog".to_string()
        } else {
            r.namespace.clone()
        };
        let schema = TableSchema {
            id: TableId::new(namespace, r.name.clone()),
            columns: schema_cols,
            key,
        };
        let info = Arc::new(RelationInfo {
            id: r.id,
            replica_identity: r.replica_identity,
            columns,
            schema: Arc::new(schema),
        });
        for c in info.columns.iter().filter(|c| !c.known_type) {
            if self.warned.insert((r.id, c.name.clone())) {
                tracing::warn!(
                    table = %info.schema.id,
                    column = %c.name,
                    type_oid = c.type_oid,
                    "column type is not known to the connector; its values pass as text"
                );
            }
        }
        self.relations.insert(r.id, info.clone());
        info
    }

    pub fn get(&self, id: u32) -> Option<&Arc<RelationInfo>> {
        self.relations.get(&id)
    }

    /// Converts a tuple of relation `id` into a row: NULL → [`Value::Null`], unchanged
    /// TOAST → [`Value::Unchanged`], text → the column's typed value.
    pub fn decode_tuple(&self, id: u32, t: &TupleData) -> Result<Row, TupleError> {
        let rel = self.get(id).ok_or(TupleError::UnknownRelation(id))?;
        decode_tuple(rel, t)
    }
}

/// Converts a tuple of `rel` into a row (see [`RelationCache::decode_tuple`]).
pub fn decode_tuple(rel: &RelationInfo, t: &TupleData) -> Result<Row, TupleError> {
    if t.columns.len() != rel.columns.len() {
        return Err(TupleError::ColumnCount {
            table: rel.schema.id.to_string(),
            expected: rel.columns.len(),
            got: t.columns.len(),
        });
    }
    let mut values = Vec::with_capacity(t.columns.len());
    for (c, v) in rel.columns.iter().zip(&t.columns) {
        values.push(match v {
            TupleColumn::Null => Value::Null,
            TupleColumn::UnchangedToast => Value::Unchanged,
            TupleColumn::Text(b) => parse_value(&c.kind, b).map_err(|error| TupleError::Value {
                table: rel.schema.id.to_string(),
                column: c.name.clone(),
                error,
            })?,
            TupleColumn::Binary(_) => {
                return Err(TupleError::Binary {
                    table: rel.schema.id.to_string(),
                    column: c.name.clone(),
                })
            }
        });
    }
    Ok(Row::new(values))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::pgoutput::RelationColumn;
    use bytes::Bytes;
    use cdc_schemas::ColumnType;
    fn rel3(identity: ReplicaIdentity, flags: [bool; 3]) -> Relation {
        Relation {
            xid: None,
            id: 9,
            namespace: "public".into(),
            name: "k".into(),
            replica_identity: identity,
            columns: ["id", "code", "v"]
                .iter()
                .zip(flags)
                .map(|(n, key)| RelationColumn {
                    key,
                    name: (*n).into(),
                    type_oid: 23,
                    type_modifier: -1,
                })
                .collect(),
        }
    }

    #[test]
    fn record_key_is_the_primary_key_when_the_identity_carries_it() {
        let pk = TableCatalog {
            primary_key: vec!["id".into()],
            not_null: ["id".to_string(), "code".to_string()].into(),
        };
        let mut cache = RelationCache::new();
        let key = |c: &mut RelationCache, r: Relation, cat: Option<&TableCatalog>| {
            c.apply_relation_with(&r, cat).schema.key.clone()
        };
        // FULL: the primary key, not every column; none without a primary key.
        let full = rel3(ReplicaIdentity::Full, [true, true, true]);
        assert_eq!(key(&mut cache, full.clone(), Some(&pk)), vec![0]);
        assert_eq!(key(&mut cache, full.clone(), None), Vec::<usize>::new());
        assert_eq!(
            key(&mut cache, full, Some(&TableCatalog::default())),
            Vec::<usize>::new()
        );
        // DEFAULT: the primary key (= the identity).
        let def = rel3(ReplicaIdentity::Default, [true, false, false]);
        assert_eq!(key(&mut cache, def.clone(), Some(&pk)), vec![0]);
        assert_eq!(key(&mut cache, def, None), vec![0]);
        // INDEX on another column: the old tuple does not carry the primary key, so the
        // identity's columns key the records.
        let idx = rel3(ReplicaIdentity::Index, [false, true, false]);
        assert_eq!(key(&mut cache, idx, Some(&pk)), vec![1]);
        // NOTHING with a primary key: the primary key.
        let nothing = rel3(ReplicaIdentity::Nothing, [false, false, false]);
        assert_eq!(key(&mut cache, nothing, Some(&pk)), vec![0]);
        // Nullability: key columns never nullable; NOT NULL columns required only where
        // the old image is complete (FULL), not where it holds the key alone (DEFAULT).
        let nullable = |c: &mut RelationCache, r: Relation| -> Vec<bool> {
            let info = c.apply_relation_with(&r, Some(&pk));
            info.schema.columns.iter().map(|c| c.nullable).collect()
        };
        assert_eq!(
            nullable(
                &mut cache,
                rel3(ReplicaIdentity::Default, [true, false, false])
            ),
            vec![false, true, true]
        );
        assert_eq!(
            nullable(&mut cache, rel3(ReplicaIdentity::Full, [true, true, true])),
            vec![false, false, true]
        );
    }

    #[test]
    fn cache_decodes_tuples() {
        let mut cache = RelationCache::new();
        let rel = Relation {
            xid: None,
            id: 7,
            namespace: "public".into(),
            name: "t".into(),
            replica_identity: ReplicaIdentity::Default,
            columns: vec![
                RelationColumn {
                    key: true,
                    name: "id".into(),
                    type_oid: 23,
                    type_modifier: -1,
                },
                RelationColumn {
                    key: false,
                    name: "v".into(),
                    type_oid: 25,
                    type_modifier: -1,
                },
                RelationColumn {
                    key: false,
                    name: "x".into(),
                    type_oid: 77777,
                    type_modifier: -1,
                },
            ],
        };
        assert_eq!(cache.unresolved_types(&rel), vec![77777]);
        cache.apply_type(&TypeMessage {
            xid: None,
            oid: 77777,
            namespace: "ext".into(),
            name: "thing".into(),
        });
        let info = cache.apply_relation(&rel);
        assert_eq!(info.schema.key, vec![0]);
        assert_eq!(
            info.schema.columns[2].ty,
            ColumnType::Unknown {
                name: "ext.thing".into()
            }
        );
        let row = cache
            .decode_tuple(
                7,
                &TupleData {
                    columns: vec![
                        TupleColumn::Text(Bytes::from_static(b"42")),
                        TupleColumn::UnchangedToast,
                        TupleColumn::Text(Bytes::from_static(b"raw")),
                    ],
                },
            )
            .unwrap();
        assert_eq!(
            row.0,
            vec![
                Value::Int32(42),
                Value::Unchanged,
                Value::Text("raw".into())
            ]
        );
        let e = cache
            .decode_tuple(
                7,
                &TupleData {
                    columns: vec![
                        TupleColumn::Text(Bytes::from_static(b"x")),
                        TupleColumn::Null,
                        TupleColumn::Null,
                    ],
                },
            )
            .unwrap_err();
        assert!(e.to_string().contains("column id"), "{e}");
        assert!(matches!(
            cache.decode_tuple(8, &TupleData::default()),
            Err(TupleError::UnknownRelation(8))
        ));
    }
}
