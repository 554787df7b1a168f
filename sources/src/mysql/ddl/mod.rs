//! Following the binlog's DDL: [`Schemas::apply_ddl`] takes the SQL text of a QUERY event
//! and evolves the captured tables' schemas exactly as the server did, so that each
//! [`MyColumn`](super::table::MyColumn) equals what `information_schema` prints after
//! the server ran the same statement (`int(11)`, `varchar(10)`, `'x'`,
//! `current_timestamp()`, … for MariaDB; MySQL 8's spelling for
//! [`Flavor::MySql8`](super::schema::Flavor::MySql8)).
//!
//! The parser is our own (a tokenizer and a recursive descent over the DDL subset that
//! changes table shapes): MariaDB accepts much that generic SQL parsers reject (`ALTER …
//! ADD COLUMN IF NOT EXISTS`, `WAIT n`, versioned comments `/*!50100 … */`, `/*M!…*/`),
//! and the server's printing of types and defaults has to be reproduced, not just parsed.
//!
//! Invariants:
//! - The stream's hot path (BEGIN, COMMIT, SAVEPOINT, SET, GRANT, …) is rejected on its
//!   first keyword, without tokenizing; DDL on tables neither captured nor kept as
//!   shadows is rejected after reading the table name.
//! - A statement either applies whole or not at all: on a [`DdlError`] the [`Schemas`]
//!   are unchanged.
//! - A captured table whose statement cannot be understood is a definite [`DdlError`]
//!   naming the statement; an uncaptured shadow in the same case is forgotten (a later
//!   rename of it onto a captured name is then the error).
//!
//! Layout: this module holds the public API ([`DdlEffect`], [`TableChange`],
//! [`DdlError`], [`Schemas::apply_ddl`]) and the statement dispatch; `lex` tokenizes,
//! `parse` holds the parser's cursor, `database`, `drop`, `rename`, `create` and `alter`
//! follow one kind of statement each, `column` and `default` read column definitions,
//! and `render` prints types and defaults as the server does.

mod alter;
mod column;
mod create;
mod database;
mod default;
mod drop;
mod lex;
mod parse;
mod rename;
mod render;
#[cfg(test)]
mod tests;

use cdc_schemas::TableId;

use super::schema::Schemas;
use super::table::MyTable;
use crate::filter::TableFilter;
use lex::lex;
use parse::P;

/// What a statement did to the captured tables, in statement order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DdlEffect {
    pub changes: Vec<TableChange>,
    /// True when the [`Schemas`] changed at all (also for shadows and database charsets):
    /// the schema history must store the new state even when `changes` is empty.
    pub schemas_changed: bool,
}

impl DdlEffect {
    /// Not DDL on a captured table (nothing for the stream to do).
    pub fn is_none(&self) -> bool {
        self.changes.is_empty()
    }
}

/// One change to a captured table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableChange {
    /// A captured name now exists: CREATE TABLE, or a rename of an uncaptured table onto
    /// a captured name.
    Created(MyTable),
    /// A captured table's schema changed: ALTER TABLE, or a rename swap that replaced it
    /// with a copy (gh-ost, pt-online-schema-change: the rows are the same rows).
    Altered(MyTable),
    /// A captured table was renamed onto another captured name.
    Renamed {
        from: TableId,
        to: TableId,
        table: MyTable,
    },
    /// A captured name no longer exists: DROP TABLE / DATABASE, CREATE OR REPLACE, or a
    /// rename to an uncaptured name.
    Dropped(TableId),
    /// TRUNCATE TABLE: every row gone, schema unchanged.
    Truncated(TableId),
    /// Rows of the table were removed or moved by a partition operation that writes no row
    /// events (`DROP`, `TRUNCATE`, `EXCHANGE`, `CONVERT PARTITION`, `CONVERT TABLE … TO
    /// PARTITION`); its schema is unchanged. The stream cannot replay those rows.
    PartitionRows {
        table: TableId,
        /// The operation, e.g. `DROP PARTITION`.
        operation: String,
    },
}

/// A DDL statement on a captured table that the source cannot follow. Definite.
#[derive(Debug, thiserror::Error)]
#[error("cannot follow the DDL statement `{statement}`{}: {reason}. Fix: {fix}", table.as_ref().map(|t| format!(" on captured table {t}")).unwrap_or_default())]
pub struct DdlError {
    /// The statement, shortened to 300 characters.
    pub statement: String,
    pub table: Option<TableId>,
    pub reason: String,
    pub fix: String,
}

impl DdlError {
    pub fn is_transient(&self) -> bool {
        false
    }
}

const FIX_SKIP: &str = "if the captured tables' shapes are known to be unaffected, set \
    source.skip_unparseable_ddl = true; otherwise re-snapshot the table";

/// Statements whose first keyword can make DDL on a table or database.
fn may_be_ddl(sql: &str) -> bool {
    let s = skip_plain_comments(sql);
    if s.starts_with("/*!") || s.starts_with("/*M!") {
        return true;
    }
    let word: String = s
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .take(9)
        .collect();
    ["CREATE", "ALTER", "DROP", "RENAME", "TRUNCATE"]
        .iter()
        .any(|k| word.eq_ignore_ascii_case(k))
}

/// `sql` without its leading whitespace and ordinary comments (not `/*!…` ones: those
/// are code).
fn skip_plain_comments(mut s: &str) -> &str {
    loop {
        s = s.trim_start();
        if s.starts_with("/*") && !s.starts_with("/*!") && !s.starts_with("/*M!") {
            match s[2..].find("*/") {
                Some(e) => s = &s[e + 4..],
                None => return "",
            }
        } else if s.starts_with('#') || s.starts_with("-- ") || s.starts_with("--\t") {
            match s.find('\n') {
                Some(e) => s = &s[e + 1..],
                None => return "",
            }
        } else {
            return s;
        }
    }
}

impl Schemas {
    /// Applies the statement of a binlog QUERY event run with default database
    /// `current_db`. Returns what happened to captured tables; ignores, quickly, what is
    /// not DDL on a captured (or shadow) table.
    pub fn apply_ddl(
        &mut self,
        current_db: Option<&str>,
        sql: &str,
        filter: &TableFilter,
    ) -> Result<DdlEffect, DdlError> {
        if !may_be_ddl(sql) {
            return Ok(DdlEffect::default());
        }
        let toks = match lex(sql) {
            Ok(t) => t,
            // Not lexable: only an error when it could concern a captured table, which we
            // cannot tell; such statements do not run on the server anyway.
            Err(reason) => {
                // Not logged: the statement may hold secrets (CREATE USER … IDENTIFIED BY).
                tracing::warn!(%reason, "ignoring a QUERY event that does not tokenize");
                return Ok(DdlEffect::default());
            }
        };
        let mut ctx = Ctx {
            s: self,
            filter,
            current_db,
            sql,
            effect: DdlEffect::default(),
        };
        let mut p = P { t: &toks, i: 0 };
        ctx.statement(&mut p)?;
        Ok(ctx.effect)
    }
}

// ---------------------------------------------------------------------------------------
// Statements

struct Ctx<'a> {
    s: &'a mut Schemas,
    filter: &'a TableFilter,
    current_db: Option<&'a str>,
    sql: &'a str,
    effect: DdlEffect,
}

/// What a table name resolves to.
enum Target {
    /// The filter captures it.
    Captured,
    /// Not captured, but its schema is (or should be) kept as a possible shadow.
    Shadow,
    /// Neither: ignore.
    Ignored,
}

impl Ctx<'_> {
    fn err(&self, table: Option<&TableId>, reason: impl Into<String>) -> DdlError {
        let mut statement: String = self.sql.trim().chars().take(300).collect();
        if statement.len() < self.sql.trim().len() {
            statement.push('…');
        }
        DdlError {
            statement,
            table: table.cloned(),
            reason: reason.into(),
            fix: FIX_SKIP.into(),
        }
    }

    fn resolve(&self, q: (Option<String>, String)) -> Result<TableId, DdlError> {
        match q.0.or_else(|| self.current_db.map(str::to_string)) {
            Some(db) => Ok(TableId::new(db, q.1)),
            None => Err(self.err(
                None,
                format!(
                    "the table name `{}` has no database and the event none",
                    q.1
                ),
            )),
        }
    }

    fn target(&self, id: &TableId) -> Target {
        if self.filter.includes(id) {
            Target::Captured
        } else if self.s.known(&id.schema, &id.name).is_some() || self.s.has_captured_in(&id.schema)
        {
            Target::Shadow
        } else {
            Target::Ignored
        }
    }

    fn statement(&mut self, p: &mut P) -> Result<(), DdlError> {
        let perr = |c: &Ctx, e: String| c.err(None, e);
        if p.eat_kw("CREATE") {
            let or_replace = p.eat_kws(&["OR", "REPLACE"]);
            if p.eat_kw("TEMPORARY") {
                return Ok(()); // session-local; never a captured table
            }
            if p.eat_kw("TABLE") {
                return self.create_table(p, or_replace);
            }
            if p.eat_kw("DATABASE") || p.eat_kw("SCHEMA") {
                return self.database_options(p, true).map_err(|e| perr(self, e));
            }
            return Ok(());
        }
        if p.eat_kw("ALTER") {
            p.eat_kw("ONLINE");
            p.eat_kw("IGNORE");
            if p.eat_kw("TABLE") {
                return self.alter_table(p);
            }
            if p.eat_kw("DATABASE") || p.eat_kw("SCHEMA") {
                return self.database_options(p, false).map_err(|e| perr(self, e));
            }
            return Ok(());
        }
        if p.eat_kw("DROP") {
            if p.eat_kw("TEMPORARY") {
                return Ok(());
            }
            if p.eat_kw("TABLE") || p.eat_kw("TABLES") {
                return self.drop_tables(p);
            }
            if p.eat_kw("DATABASE") || p.eat_kw("SCHEMA") {
                p.eat_kws(&["IF", "EXISTS"]);
                let db = p.ident().map_err(|e| perr(self, e))?;
                self.drop_database(&db);
            }
            return Ok(());
        }
        if p.eat_kw("RENAME") {
            if p.eat_kw("TABLE") || p.eat_kw("TABLES") {
                return self.rename_tables(p);
            }
            return Ok(());
        }
        if p.eat_kw("TRUNCATE") {
            p.eat_kw("TABLE");
            let q = p.qname().map_err(|e| perr(self, e))?;
            let id = self.resolve(q)?;
            if self.s.get_id(&id).is_some() {
                self.effect.changes.push(TableChange::Truncated(id));
            }
        }
        Ok(())
    }
}
