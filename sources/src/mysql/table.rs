//! The MySQL / MariaDB source's model of a captured table: what `information_schema`
//! (at a snapshot) or the schema history (after DDL) says of each column, beyond what
//! the core's [`TableSchema`] keeps — signedness, character set, ENUM/SET members, the
//! declared length and fractional-second precision — because binlog row events carry
//! none of it (only the physical type and, with `binlog_row_metadata=FULL`, some).
//!
//! Invariants: `columns` are in ordinal order (the order of a row event's values);
//! `key` names columns of the table; [`MyTable::schema`] is derived, never edited.

use std::sync::Arc;

use cdc_schemas::table::SchemaError;
use cdc_schemas::{Column, TableId, TableSchema};

use super::decode;

/// One column as the server declares it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MyColumn {
    pub name: String,
    /// `information_schema.COLUMNS.DATA_TYPE`, lower case: `int`, `varchar`, `enum`, ….
    pub data_type: String,
    /// `information_schema.COLUMNS.COLUMN_TYPE` as the server prints it:
    /// `int(10) unsigned`, `varchar(255)`, `enum('a','b')`, `datetime(6)`, ….
    pub column_type: String,
    /// The column's character set (`utf8mb4`, `latin1`, `binary`, …); `None` for types
    /// without one (numbers, dates, JSON on MySQL).
    pub charset: Option<String>,
    pub nullable: bool,
    /// The default as `information_schema.COLUMNS.COLUMN_DEFAULT` reports it.
    pub default: Option<String>,
    /// A generated (virtual or stored) column: present in row events only when stored
    /// (MariaDB and MySQL log both kinds in full-image rows; see `decode`).
    pub generated: bool,
}

impl MyColumn {
    /// `UNSIGNED` (and `ZEROFILL`, which implies it) in the column type.
    pub fn unsigned(&self) -> bool {
        let t = self.column_type.to_ascii_lowercase();
        t.contains("unsigned") || t.contains("zerofill")
    }
}

/// One captured table.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MyTable {
    /// Database (schema) and table name, as the server spells them.
    pub database: String,
    pub name: String,
    pub columns: Vec<MyColumn>,
    /// Primary key column names, in key order (empty: no primary key).
    pub key: Vec<String>,
}

impl MyTable {
    pub fn id(&self) -> TableId {
        TableId::new(self.database.clone(), self.name.clone())
    }

    /// The core's schema of this table: every column's [`decode::column_type`].
    pub fn schema(&self) -> Result<Arc<TableSchema>, SchemaError> {
        let columns = self
            .columns
            .iter()
            .map(|c| {
                let mut col = Column::new(&c.name, decode::column_type(c), &c.column_type);
                col.nullable = c.nullable;
                col.default = c.default.clone();
                col
            })
            .collect();
        let key: Vec<&str> = self.key.iter().map(String::as_str).collect();
        TableSchema::new(self.id(), columns, &key).map(Arc::new)
    }
}
