//! What the MySQL / MariaDB source knows of table schemas: loading them from
//! `information_schema` ([`load_tables`], [`Schemas::load`]) and keeping them, per
//! `(database, table)`, in [`Schemas`] — the state a schema history stores and the binlog's
//! DDL ([`super::ddl`]) evolves.
//!
//! Invariants:
//! - [`Schemas`] holds every captured table's current [`MyTable`]; iteration and `get`
//!   see only captured tables. It also keeps, apart, the schemas of some uncaptured
//!   tables ("shadows": the `_t_gho` / `_t_new` copies online-schema-change tools build
//!   and then rename onto a captured name), so that such a rename gives the captured name
//!   the right schema.
//! - Each known table carries its default character set (the table's, else its
//!   database's), which a later `ADD COLUMN c VARCHAR(10)` inherits.
//! - Database and table names are case-sensitive (`lower_case_table_names = 0`, the Linux
//!   default); column names are compared case-insensitively, as the server does.

use std::collections::BTreeMap;

use cdc_schemas::TableId;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};

use super::table::{MyColumn, MyTable};
use crate::filter::TableFilter;

/// The databases never captured: the server's own.
pub const SYSTEM_DATABASES: &[&str] = &["mysql", "information_schema", "performance_schema", "sys"];

/// Which server prints the column types: MariaDB keeps integer display widths
/// (`int(11)`), MySQL 8.0.19+ drops them (`int`), and they quote defaults differently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Flavor {
    #[default]
    MariaDb,
    /// MySQL 8 (display widths dropped except `tinyint(1)` and ZEROFILL columns).
    MySql8,
    /// MySQL 5.7 (display widths printed, defaults unquoted).
    MySql57,
}

impl Flavor {
    /// From `SELECT VERSION()`: `10.11.6-MariaDB-…`, `8.0.36`, `5.7.44-log`.
    pub fn from_version(version: &str) -> Flavor {
        if version.to_ascii_lowercase().contains("mariadb") {
            return Flavor::MariaDb;
        }
        let mut parts = version.split(|c: char| !c.is_ascii_digit());
        let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(8);
        let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let patch: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if (major, minor, patch) >= (8, 0, 19) {
            Flavor::MySql8
        } else {
            Flavor::MySql57
        }
    }

    pub fn is_mariadb(self) -> bool {
        self == Flavor::MariaDb
    }
}

/// Why loading schemas failed.
#[derive(Debug, thiserror::Error)]
pub enum SchemaLoadError {
    /// The connection broke: retry.
    #[error("reading table schemas from information_schema failed: the connection broke ({0}). Fix: none needed, the source retries")]
    Connection(#[source] mysql_async::Error),
    /// The user may not read what is needed.
    #[error(
        "reading table schemas from information_schema was refused: {message}. Fix: GRANT {grant}"
    )]
    Privilege { message: String, grant: String },
    /// Any other server error (definite).
    #[error("reading table schemas from information_schema failed: {0}. Fix: check the server's error log and that the user may read information_schema")]
    Query(#[source] mysql_async::Error),
}

impl SchemaLoadError {
    pub fn is_transient(&self) -> bool {
        matches!(self, SchemaLoadError::Connection(_))
    }

    fn from_my(e: mysql_async::Error) -> Self {
        match &e {
            mysql_async::Error::Server(s) => match s.code {
                // ER_DBACCESS_DENIED_ERROR, ER_TABLEACCESS_DENIED_ERROR,
                // ER_COLUMNACCESS_DENIED_ERROR, ER_SPECIFIC_ACCESS_DENIED_ERROR.
                1044 | 1142 | 1143 | 1227 => SchemaLoadError::Privilege {
                    message: s.message.clone(),
                    grant: "SELECT ON <each captured database>.* TO the source's user \
                            (information_schema shows only tables the user may read)"
                        .into(),
                },
                // ER_CON_COUNT_ERROR, ER_SERVER_SHUTDOWN, ER_QUERY_INTERRUPTED,
                // ER_LOCK_WAIT_TIMEOUT, ER_LOCK_DEADLOCK, ER_CONNECTION_KILLED.
                1040 | 1053 | 1317 | 1205 | 1213 | 1927 => SchemaLoadError::Connection(e),
                _ => SchemaLoadError::Query(e),
            },
            mysql_async::Error::Io(_) | mysql_async::Error::Driver(_) => {
                SchemaLoadError::Connection(e)
            }
            _ => SchemaLoadError::Query(e),
        }
    }
}

/// One table the source knows: its schema, its default character set, and whether the
/// filter captures it (uncaptured ones are shadows, see the module doc).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Known {
    pub(crate) table: MyTable,
    /// The table's default character set (`DEFAULT CHARSET=`), `None` when unknown (then
    /// the database's applies).
    pub(crate) charset: Option<String>,
    pub(crate) captured: bool,
}

/// The current schema of every captured table, and what DDL needs to evolve them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Schemas {
    pub flavor: Flavor,
    /// database → table → what is known of it.
    pub(crate) tables: BTreeMap<String, BTreeMap<String, Known>>,
    /// database → its default character set (`information_schema.SCHEMATA`,
    /// `CREATE/ALTER DATABASE … CHARACTER SET`).
    pub(crate) default_charsets: BTreeMap<String, String>,
    /// The server's `character_set_server`, for databases created without a charset.
    #[serde(default)]
    pub(crate) server_charset: Option<String>,
    /// `explicit_defaults_for_timestamp = OFF` (MySQL 5.7, MariaDB before 10.10): TIMESTAMP
    /// columns are NOT NULL unless declared NULL, and the first defaults to the current time.
    #[serde(default)]
    pub legacy_timestamps: bool,
}

impl Schemas {
    pub fn new(flavor: Flavor) -> Self {
        Schemas {
            flavor,
            ..Default::default()
        }
    }

    /// Reads the flavour, the databases' default character sets, and the schemas of the
    /// tables the filter captures (and of their shadow copies) from `information_schema`.
    pub async fn load(conn: &mut Conn, filter: &TableFilter) -> Result<Schemas, SchemaLoadError> {
        let err = SchemaLoadError::from_my;
        let (version, server_charset, explicit_ts): (String, Option<String>, Option<String>) = conn
            .query_first(
                "SELECT VERSION(), @@character_set_server, @@explicit_defaults_for_timestamp",
            )
            .await
            .map_err(err)?
            .unwrap_or_default();
        let mut s = Schemas::new(Flavor::from_version(&version));
        s.legacy_timestamps =
            explicit_ts.is_some_and(|v| v == "0" || v.eq_ignore_ascii_case("OFF"));
        s.server_charset = server_charset.map(|c| normalize_charset(&c));
        let rows: Vec<(String, Option<String>)> = conn
            .query(format!(
                "SELECT SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME FROM information_schema.SCHEMATA \
                 WHERE SCHEMA_NAME NOT IN ({})",
                system_list()
            ))
            .await
            .map_err(err)?;
        for (db, cs) in rows {
            if let Some(cs) = cs {
                s.default_charsets.insert(db, normalize_charset(&cs));
            }
        }
        let all = read_tables(conn).await?;
        // Shadows: uncaptured tables whose names online-schema-change tools use (they
        // start with `_`), in databases that hold a captured table.
        let captured_dbs: std::collections::BTreeSet<String> = all
            .iter()
            .filter(|(t, _)| filter.includes(&t.id()))
            .map(|(t, _)| t.database.clone())
            .collect();
        for (table, charset) in all {
            let captured = filter.includes(&table.id());
            if captured || (captured_dbs.contains(&table.database) && table.name.starts_with('_')) {
                s.put(table, charset, captured);
            }
        }
        Ok(s)
    }

    /// The captured table `database.name`.
    pub fn get(&self, database: &str, name: &str) -> Option<&MyTable> {
        self.known(database, name)
            .filter(|k| k.captured)
            .map(|k| &k.table)
    }

    /// The captured table `id`.
    pub fn get_id(&self, id: &TableId) -> Option<&MyTable> {
        self.get(&id.schema, &id.name)
    }

    /// Adds or replaces a captured table (its default charset: its database's).
    pub fn insert(&mut self, table: MyTable) -> Option<MyTable> {
        self.put(table, None, true)
            .filter(|k| k.captured)
            .map(|k| k.table)
    }

    /// Removes a captured table.
    pub fn remove(&mut self, database: &str, name: &str) -> Option<MyTable> {
        if !self.known(database, name).is_some_and(|k| k.captured) {
            return None;
        }
        self.take(database, name).map(|k| k.table)
    }

    /// The captured tables, ordered by (database, table).
    pub fn iter(&self) -> impl Iterator<Item = &MyTable> {
        self.tables
            .values()
            .flat_map(|m| m.values())
            .filter(|k| k.captured)
            .map(|k| &k.table)
    }

    pub fn len(&self) -> usize {
        self.iter().count()
    }

    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// The default character set of `database` (as `information_schema.SCHEMATA` or the
    /// last `CREATE/ALTER DATABASE` says), else the server's.
    pub fn default_charset(&self, database: &str) -> Option<&str> {
        self.default_charsets
            .get(database)
            .or(self.server_charset.as_ref())
            .map(String::as_str)
    }

    pub fn set_default_charset(&mut self, database: &str, charset: &str) {
        self.default_charsets
            .insert(database.to_string(), normalize_charset(charset));
    }

    /// The default character set of a known table (captured or shadow).
    pub fn table_charset(&self, database: &str, name: &str) -> Option<&str> {
        self.known(database, name)
            .and_then(|k| k.charset.as_deref())
            .or_else(|| self.default_charset(database))
    }

    pub(crate) fn known(&self, database: &str, name: &str) -> Option<&Known> {
        self.tables.get(database).and_then(|m| m.get(name))
    }

    pub(crate) fn put(
        &mut self,
        table: MyTable,
        charset: Option<String>,
        captured: bool,
    ) -> Option<Known> {
        self.tables
            .entry(table.database.clone())
            .or_default()
            .insert(
                table.name.clone(),
                Known {
                    table,
                    charset,
                    captured,
                },
            )
    }

    pub(crate) fn take(&mut self, database: &str, name: &str) -> Option<Known> {
        let m = self.tables.get_mut(database)?;
        let k = m.remove(name);
        if m.is_empty() {
            self.tables.remove(database);
        }
        k
    }

    /// True when `database` holds a captured table (its uncaptured tables are then kept
    /// as possible shadows).
    pub(crate) fn has_captured_in(&self, database: &str) -> bool {
        self.tables
            .get(database)
            .is_some_and(|m| m.values().any(|k| k.captured))
    }
}

impl<'a> IntoIterator for &'a Schemas {
    type Item = &'a MyTable;
    type IntoIter = Box<dyn Iterator<Item = &'a MyTable> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

/// Every base table of every non-system database that `filter` accepts, with its columns
/// in ordinal order and its primary key in key order. Two queries in all, whatever the
/// number of tables.
pub async fn load_tables(
    conn: &mut Conn,
    filter: &TableFilter,
) -> Result<Vec<MyTable>, SchemaLoadError> {
    Ok(read_tables(conn)
        .await?
        .into_iter()
        .map(|(t, _)| t)
        .filter(|t| filter.includes(&t.id()))
        .collect())
}

fn system_list() -> String {
    SYSTEM_DATABASES
        .iter()
        .map(|d| format!("'{d}'"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Every non-system base table with its default charset (from `TABLE_COLLATION`).
async fn read_tables(conn: &mut Conn) -> Result<Vec<(MyTable, Option<String>)>, SchemaLoadError> {
    let err = SchemaLoadError::from_my;
    // `SYSTEM VERSIONED` is MariaDB's type for a system-versioned base table; views and
    // sequences are not captured.
    let columns: Vec<Row> = conn
        .query(format!(
            "SELECT c.TABLE_SCHEMA, c.TABLE_NAME, c.COLUMN_NAME, c.DATA_TYPE, c.COLUMN_TYPE, \
                    c.CHARACTER_SET_NAME, c.IS_NULLABLE, c.COLUMN_DEFAULT, c.EXTRA, t.TABLE_COLLATION \
             FROM information_schema.COLUMNS c \
             JOIN information_schema.TABLES t \
               ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME \
             WHERE t.TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED') \
               AND c.TABLE_SCHEMA NOT IN ({}) \
             ORDER BY c.TABLE_SCHEMA, c.TABLE_NAME, c.ORDINAL_POSITION",
            system_list()
        ))
        .await
        .map_err(err)?;
    let keys: Vec<Row> = conn
        .query(format!(
            "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.STATISTICS \
             WHERE INDEX_NAME = 'PRIMARY' AND TABLE_SCHEMA NOT IN ({}) \
             ORDER BY TABLE_SCHEMA, TABLE_NAME, SEQ_IN_INDEX",
            system_list()
        ))
        .await
        .map_err(err)?;

    let mut out: Vec<(MyTable, Option<String>)> = Vec::new();
    let mut index: BTreeMap<(String, String), usize> = BTreeMap::new();
    for row in &columns {
        let db = text(row, 0).unwrap_or_default();
        let name = text(row, 1).unwrap_or_default();
        let i = *index.entry((db.clone(), name.clone())).or_insert_with(|| {
            let charset = text(row, 9).map(|c| charset_of_collation(&c));
            out.push((
                MyTable {
                    database: db,
                    name,
                    columns: Vec::new(),
                    key: Vec::new(),
                },
                charset,
            ));
            out.len() - 1
        });
        let extra = text(row, 8).unwrap_or_default().to_ascii_uppercase();
        out[i].0.columns.push(MyColumn {
            name: text(row, 2).unwrap_or_default(),
            data_type: text(row, 3).unwrap_or_default().to_ascii_lowercase(),
            column_type: text(row, 4).unwrap_or_default(),
            // `utf8` (MySQL < 8.0.30, MariaDB < 10.6) is `utf8mb3`, as DDL is read.
            charset: text(row, 5).map(|c| normalize_charset(&c)),
            nullable: text(row, 6).is_some_and(|n| n.eq_ignore_ascii_case("YES")),
            default: text(row, 7),
            generated: is_generated_extra(&extra),
        });
    }
    for row in &keys {
        let db = text(row, 0).unwrap_or_default();
        let name = text(row, 1).unwrap_or_default();
        if let Some(&i) = index.get(&(db, name)) {
            if let Some(c) = text(row, 2) {
                out[i].0.key.push(c);
            }
        }
    }
    tracing::debug!(
        tables = out.len(),
        "read table schemas from information_schema"
    );
    Ok(out)
}

/// `EXTRA` of a generated column: `VIRTUAL GENERATED` / `STORED GENERATED` (MySQL 5.7+,
/// MariaDB 10.2+), `VIRTUAL` / `PERSISTENT` (older MariaDB). MySQL's `DEFAULT_GENERATED`
/// marks an expression default, not a generated column.
fn is_generated_extra(extra_upper: &str) -> bool {
    extra_upper
        .split_whitespace()
        .any(|w| matches!(w, "VIRTUAL" | "PERSISTENT" | "STORED"))
}

/// A text cell; `information_schema` columns may come back as binary strings on MySQL 8.
fn text(row: &Row, i: usize) -> Option<String> {
    match row.as_ref(i)? {
        mysql_async::Value::NULL => None,
        mysql_async::Value::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
        other => Some(other.as_sql(true).trim_matches('\'').to_string()),
    }
}

/// The server's name of a character set: `utf8` means `utf8mb3` (MariaDB 10.6+ and
/// MySQL 8 print the latter).
pub fn normalize_charset(cs: &str) -> String {
    let cs = cs.to_ascii_lowercase();
    if cs == "utf8" {
        "utf8mb3".into()
    } else {
        cs
    }
}

/// The character set a collation belongs to: the part before the first `_`
/// (`utf8mb4_unicode_ci` → `utf8mb4`, `latin1_swedish_ci` → `latin1`), `binary` itself.
pub fn charset_of_collation(collation: &str) -> String {
    let c = collation.to_ascii_lowercase();
    normalize_charset(c.split('_').next().unwrap_or(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(db: &str, name: &str) -> MyTable {
        MyTable {
            database: db.into(),
            name: name.into(),
            columns: vec![],
            key: vec![],
        }
    }

    #[test]
    fn flavours() {
        assert_eq!(
            Flavor::from_version("10.11.6-MariaDB-0+deb12u1-log"),
            Flavor::MariaDb
        );
        assert_eq!(Flavor::from_version("8.0.36"), Flavor::MySql8);
        assert_eq!(Flavor::from_version("8.0.18"), Flavor::MySql57);
        assert_eq!(Flavor::from_version("5.7.44-log"), Flavor::MySql57);
        assert_eq!(Flavor::from_version("8.4.0"), Flavor::MySql8);
    }

    #[test]
    fn collations() {
        assert_eq!(charset_of_collation("utf8mb4_uca1400_ai_ci"), "utf8mb4");
        assert_eq!(charset_of_collation("latin1_swedish_ci"), "latin1");
        assert_eq!(charset_of_collation("utf8_general_ci"), "utf8mb3");
        assert_eq!(charset_of_collation("binary"), "binary");
        assert!(is_generated_extra("STORED GENERATED"));
        assert!(!is_generated_extra(
            "DEFAULT_GENERATED ON UPDATE CURRENT_TIMESTAMP"
        ));
    }

    #[test]
    fn captured_and_shadows() {
        let mut s = Schemas::new(Flavor::MariaDb);
        s.insert(table("d", "t"));
        s.put(table("d", "_t_gho"), None, false);
        assert!(s.get("d", "t").is_some());
        assert!(s.get("d", "_t_gho").is_none());
        assert_eq!(s.iter().count(), 1);
        assert!(s.remove("d", "_t_gho").is_none());
        let json = serde_json::to_string(&s).unwrap();
        let back: Schemas = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
        assert!(s.remove("d", "t").is_some());
        assert!(s.is_empty());
    }
}
