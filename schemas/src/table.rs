//! Table schemas: the columns of a captured table, their types and its key.
//!
//! [`ColumnType`] is the connector's logical type: precise enough to derive a Kafka
//! Connect / Avro schema the way Debezium does, and to check that a [`crate::Value`]
//! fits. Each column also keeps the source's own type name (`int4`, `varchar(255)`,
//! `enum('a','b')`) for the envelope and for error messages.
//!
//! Invariant: every index in [`TableSchema::key`] is a valid column index, without
//! repeats.

use std::fmt;

/// A table's identity: Postgres `schema.table`, or MySQL `database.table`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableId {
    /// Postgres schema, or MySQL database.
    pub schema: String,
    pub name: String,
}

impl TableId {
    pub fn new(schema: impl Into<String>, name: impl Into<String>) -> Self {
        TableId {
            schema: schema.into(),
            name: name.into(),
        }
    }

    /// Parses `schema.table`. A name without a dot gets `default_schema`.
    pub fn parse(s: &str, default_schema: &str) -> Self {
        match s.split_once('.') {
            Some((schema, name)) => TableId::new(schema, name),
            None => TableId::new(default_schema, s),
        }
    }
}

impl fmt::Display for TableId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.schema, self.name)
    }
}

/// The logical type of a column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ColumnType {
    Bool,
    Int16,
    Int32,
    Int64,
    /// MySQL `BIGINT UNSIGNED`.
    UInt64,
    Float32,
    Float64,
    /// `None` precision: unconstrained Postgres `numeric`.
    Decimal {
        precision: Option<u32>,
        scale: Option<u32>,
    },
    /// Variable or fixed-length character data; `max_len` in characters where declared.
    Text {
        max_len: Option<u32>,
    },
    Bytes,
    Json,
    Uuid,
    Date,
    /// `precision` is the number of fractional-second digits declared (0–6).
    Time {
        precision: Option<u8>,
    },
    TimeTz {
        precision: Option<u8>,
    },
    Timestamp {
        precision: Option<u8>,
    },
    TimestampTz {
        precision: Option<u8>,
    },
    Interval,
    /// MySQL `YEAR`.
    Year,
    /// An enumeration: Postgres enum type or MySQL `ENUM`. Values are [`crate::Value::Text`].
    Enum {
        name: String,
        symbols: Vec<String>,
    },
    /// MySQL `SET`: values are [`crate::Value::Text`], members joined by commas.
    Set {
        symbols: Vec<String>,
    },
    Bits {
        len: Option<u32>,
        varying: bool,
    },
    /// MySQL spatial types (GEOMETRY, POINT, LINESTRING, …): values are [`crate::Value::Bytes`]
    /// in MySQL's internal form, a 4-byte little-endian SRID followed by the WKB.
    /// `point`: a POINT column (Debezium gives it its own struct, with `x` and `y`).
    Geometry {
        point: bool,
    },
    /// Network and other types with a canonical text form (inet, cidr, macaddr, money,
    /// xml, tsvector, geometry as WKT…): values are [`crate::Value::Text`]. `name` is the
    /// semantic name (`inet`, `cidr`, `macaddr`, `macaddr8`, `money`, `xml`, ...).
    TextLike {
        name: String,
    },
    Array(Box<ColumnType>),
    /// Composite (row) types: values are [`crate::Value::Json`].
    Composite {
        name: String,
    },
    /// A type the connector does not know: values pass as [`crate::Value::Text`].
    Unknown {
        name: String,
    },
}

/// One column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub ty: ColumnType,
    /// The source's own type name, e.g. `int4`, `varchar(255)`, `enum('a','b')`.
    pub source_type: String,
    pub nullable: bool,
    /// The column's default expression as the source reports it, if any.
    pub default: Option<String>,
}

impl Column {
    pub fn new(name: impl Into<String>, ty: ColumnType, source_type: impl Into<String>) -> Self {
        Column {
            name: name.into(),
            ty,
            source_type: source_type.into(),
            nullable: true,
            default: None,
        }
    }

    pub fn not_null(mut self) -> Self {
        self.nullable = false;
        self
    }
}

/// A captured table's shape at one point in its history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableSchema {
    pub id: TableId,
    pub columns: Vec<Column>,
    /// Indexes into `columns` of the key columns (primary key, replica identity index,
    /// or configured key columns), in key order. Empty: the table has no key, and its
    /// records are keyless.
    pub key: Vec<usize>,
}

/// A schema that breaks [`TableSchema`]'s invariants.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SchemaError {
    #[error("table {table}: key column {column:?} is not a column of the table")]
    UnknownKeyColumn { table: TableId, column: String },
    #[error("table {table}: column {column:?} appears twice")]
    DuplicateColumn { table: TableId, column: String },
}

impl TableSchema {
    /// Builds a schema whose key is given by column names.
    pub fn new(
        id: TableId,
        columns: Vec<Column>,
        key_columns: &[&str],
    ) -> Result<Self, SchemaError> {
        for (i, c) in columns.iter().enumerate() {
            if columns[..i].iter().any(|p| p.name == c.name) {
                return Err(SchemaError::DuplicateColumn {
                    table: id,
                    column: c.name.clone(),
                });
            }
        }
        let mut key = Vec::with_capacity(key_columns.len());
        for k in key_columns {
            match columns.iter().position(|c| c.name == *k) {
                Some(i) if !key.contains(&i) => key.push(i),
                Some(_) => {}
                None => {
                    return Err(SchemaError::UnknownKeyColumn {
                        table: id,
                        column: (*k).to_string(),
                    })
                }
            }
        }
        Ok(TableSchema { id, columns, key })
    }

    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    pub fn key_columns(&self) -> impl Iterator<Item = &Column> {
        self.key.iter().map(|&i| &self.columns[i])
    }

    pub fn has_key(&self) -> bool {
        !self.key.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols() -> Vec<Column> {
        vec![
            Column::new("id", ColumnType::Int64, "int8").not_null(),
            Column::new("name", ColumnType::Text { max_len: None }, "text"),
        ]
    }

    #[test]
    fn key_by_name() {
        let t = TableSchema::new(TableId::new("public", "t"), cols(), &["id"]).unwrap();
        assert_eq!(t.key, vec![0]);
        assert_eq!(t.key_columns().next().unwrap().name, "id");
    }

    #[test]
    fn unknown_key_and_duplicates_are_errors() {
        assert!(matches!(
            TableSchema::new(TableId::new("s", "t"), cols(), &["nope"]),
            Err(SchemaError::UnknownKeyColumn { .. })
        ));
        let mut c = cols();
        c.push(c[0].clone());
        assert!(matches!(
            TableSchema::new(TableId::new("s", "t"), c, &[]),
            Err(SchemaError::DuplicateColumn { .. })
        ));
    }

    #[test]
    fn table_id_parse() {
        assert_eq!(TableId::parse("a.b", "public"), TableId::new("a", "b"));
        assert_eq!(TableId::parse("b", "public"), TableId::new("public", "b"));
        assert_eq!(TableId::new("a", "b").to_string(), "a.b");
    }
}
