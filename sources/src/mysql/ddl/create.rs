//! CREATE TABLE (also `… LIKE`, `CREATE OR REPLACE`): the table built from its column
//! list and options, and the table-level elements (keys) that matter to the source.
//!
//! Invariants: a table without its own charset takes its database's at creation; the
//! primary key's columns are NOT NULL and spelled as their columns are.

use cdc_schemas::TableId;

use super::column::{column_def, promote_first_timestamp, Dialect};
use super::database::charset_option;
use super::parse::P;
use super::{Ctx, DdlError, TableChange, Target};
use crate::mysql::schema::{charset_of_collation, Flavor};
use crate::mysql::table::MyTable;

impl Ctx<'_> {
    pub(super) fn create_table(&mut self, p: &mut P, or_replace: bool) -> Result<(), DdlError> {
        let if_not_exists = p.eat_kws(&["IF", "NOT", "EXISTS"]);
        let q = p.qname().map_err(|e| self.err(None, e))?;
        let id = self.resolve(q)?;
        let target = self.target(&id);
        if matches!(target, Target::Ignored) {
            return Ok(());
        }
        let exists = self.s.known(&id.schema, &id.name).is_some();
        if exists && if_not_exists {
            return Ok(());
        }
        let captured = matches!(target, Target::Captured);
        let built = if p.eat_kw("LIKE") || (p.is_sym("(") && p.kw_at(1, "LIKE")) {
            let paren = p.eat_sym("(");
            if paren {
                p.eat_kw("LIKE");
            }
            let src = p.qname().map_err(|e| self.err(Some(&id), e))?;
            let src = self.resolve(src)?;
            match self.s.known(&src.schema, &src.name) {
                Some(k) => {
                    let mut t = k.table.clone();
                    t.database = id.schema.clone();
                    t.name = id.name.clone();
                    Ok((t, k.charset.clone()))
                }
                None => Err(format!(
                    "CREATE TABLE … LIKE {src}: the schema of {src} is unknown"
                )),
            }
        } else {
            let db_charset = self.s.default_charset(&id.schema).map(str::to_string);
            create_body(p, self.s.dialect(), &id, db_charset)
        };
        let (table, charset) = match built {
            Ok(b) => b,
            Err(reason) if captured => return Err(self.err(Some(&id), reason)),
            Err(reason) => {
                tracing::debug!(table = %id, %reason, "forgetting an uncaptured table whose CREATE is not understood");
                if self.s.take(&id.schema, &id.name).is_some() {
                    self.effect.schemas_changed = true;
                }
                return Ok(());
            }
        };
        if let Some(old) = self.s.take(&id.schema, &id.name) {
            if old.captured && (or_replace || exists) {
                self.effect.changes.push(TableChange::Dropped(id.clone()));
            }
        }
        if captured {
            self.effect
                .changes
                .push(TableChange::Created(table.clone()));
        }
        self.s.put(table, charset, captured);
        self.effect.schemas_changed = true;
        Ok(())
    }
}

// CREATE TABLE body

/// `( elements ) options [partitioning]` → the table and its default charset.
fn create_body(
    p: &mut P,
    dialect: Dialect,
    id: &TableId,
    db_charset: Option<String>,
) -> Result<(MyTable, Option<String>), String> {
    if !p.is_sym("(") {
        return Err("CREATE TABLE … SELECT without a column list: the columns are unknown".into());
    }
    // The table charset is in the options after the column list, and columns without
    // their own inherit it: read the options first.
    let start = p.i;
    p.skip_group();
    let (charset, versioned, select) = table_options(p)?;
    if versioned {
        return Err("system-versioned tables (WITH SYSTEM VERSIONING) are not supported".into());
    }
    if select {
        return Err("CREATE TABLE … SELECT: the selected columns are unknown".into());
    }
    let end = p.i;
    p.i = start;
    p.expect_sym("(")?;
    // A table without its own charset takes its database's, at creation: later changes
    // to the database's do not reach it.
    let charset = charset.or(db_charset);
    let table_cs = charset.clone();
    let flavor = dialect.flavor;
    let mut promotable = Vec::new();
    let mut table = MyTable {
        database: id.schema.clone(),
        name: id.name.clone(),
        columns: Vec::new(),
        key: Vec::new(),
    };
    loop {
        if let Some(pk) = table_element_pk(p)? {
            if let Some(pk) = pk {
                table.key = pk;
            }
        } else {
            let def = column_def(p, dialect, table_cs.as_deref())?;
            if def.primary {
                table.key = vec![def.column.name.clone()];
            }
            if def.promotable {
                promotable.push(def.column.name.clone());
            }
            table.columns.push(def.column);
        }
        if p.eat_sym(",") {
            continue;
        }
        p.expect_sym(")")?;
        break;
    }
    p.i = end;
    fix_key_names(&mut table)?;
    promote_first_timestamp(&mut table, &promotable, flavor);
    enforce_key_not_null(&mut table, flavor);
    Ok((table, charset))
}

/// Table options after the column list: the charset (or the collation's), whether
/// `WITH SYSTEM VERSIONING` is set, whether a SELECT follows. Stops at the end or at
/// partitioning (ignored).
fn table_options(p: &mut P) -> Result<(Option<String>, bool, bool), String> {
    let (mut cs, mut coll, mut versioned) = (None, None, false);
    while !p.done() {
        if p.is_kw("PARTITION") {
            break;
        }
        if p.is_kw("SELECT") || p.is_kw("AS") || p.is_kw("IGNORE") || p.is_kw("REPLACE") {
            return Ok((None, versioned, true));
        }
        if p.eat_kws(&["WITH", "SYSTEM", "VERSIONING"]) {
            versioned = true;
            continue;
        }
        charset_option(p, &mut cs, &mut coll)?;
    }
    Ok((
        cs.or(coll.map(|c| charset_of_collation(&c))),
        versioned,
        false,
    ))
}

/// A table-level element that is not a column: `Some(Some(cols))` for a PRIMARY KEY,
/// `Some(None)` for other keys and constraints (skipped), `None` for a column.
pub(super) fn table_element_pk(p: &mut P) -> Result<Option<Option<Vec<String>>>, String> {
    let start = p.i;
    if p.eat_kw("CONSTRAINT")
        && !(p.is_kw("PRIMARY") || p.is_kw("UNIQUE") || p.is_kw("FOREIGN") || p.is_kw("CHECK"))
    {
        p.ident()?;
    }
    if p.eat_kws(&["PRIMARY", "KEY"]) {
        return Ok(Some(Some(key_columns(p)?)));
    }
    let other = [
        "UNIQUE", "FOREIGN", "CHECK", "INDEX", "KEY", "FULLTEXT", "SPATIAL",
    ];
    if other.iter().any(|k| p.is_kw(k)) || p.eat_kws(&["PERIOD", "FOR"]) {
        // A column may be named like these words only when quoted (they are reserved),
        // except PERIOD, handled above by its FOR.
        p.skip_clause();
        return Ok(Some(None));
    }
    p.i = start;
    Ok(None)
}

/// `[index_name] [USING x] (col[(len)] [ASC|DESC], …) [options]` → the column names.
fn key_columns(p: &mut P) -> Result<Vec<String>, String> {
    while !p.is_sym("(") {
        if p.done() {
            return Err("a key without its column list".into());
        }
        p.skip_one();
    }
    let inner = p.skip_group();
    let mut q = P { t: inner, i: 0 };
    let mut cols = Vec::new();
    while q.i < inner.len() {
        cols.push(q.ident()?);
        q.skip_clause();
        q.eat_sym(",");
    }
    p.skip_clause();
    Ok(cols)
}

/// Key column names as their columns spell them (names compare case-insensitively).
pub(super) fn fix_key_names(t: &mut MyTable) -> Result<(), String> {
    for k in &mut t.key {
        match t.columns.iter().find(|c| c.name.eq_ignore_ascii_case(k)) {
            Some(c) => *k = c.name.clone(),
            None => {
                return Err(format!(
                    "the primary key names a column `{k}` the table lacks"
                ))
            }
        }
    }
    Ok(())
}

/// Primary key columns are NOT NULL, whatever their definition said (the server makes
/// them so); a nullable column's implicit `NULL` default goes with it.
pub(super) fn enforce_key_not_null(t: &mut MyTable, flavor: Flavor) {
    for k in &t.key {
        if let Some(c) = t
            .columns
            .iter_mut()
            .find(|c| c.name.eq_ignore_ascii_case(k))
        {
            if c.nullable {
                c.nullable = false;
                if flavor.is_mariadb() && c.default.as_deref() == Some("NULL") {
                    c.default = None;
                }
            }
        }
    }
}
