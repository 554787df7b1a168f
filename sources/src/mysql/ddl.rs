//! Following the binlog's DDL: [`Schemas::apply_ddl`] takes the SQL text of a QUERY event
//! and evolves the captured tables' schemas exactly as the server did, so that each
//! [`MyColumn`] equals what `information_schema` prints after the server ran the same
//! statement (`int(11)`, `varchar(10)`, `'x'`, `current_timestamp()`, … for MariaDB;
//! MySQL 8's spelling for [`Flavor::MySql8`]).
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

use cdc_schemas::TableId;

use super::schema::{charset_of_collation, normalize_charset, Flavor, Schemas};
use super::table::{MyColumn, MyTable};
use crate::filter::TableFilter;

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

const FIX_SKIP: &str = "if the captured tables' shapes are known to be unaffected, configure the \
    source to skip unparseable DDL; otherwise re-snapshot the table";

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
                tracing::debug!(%reason, "ignoring a QUERY event that does not tokenize");
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

/// In one RENAME TABLE, `Dropped(x)` followed by `Created(x)` is a swap (the
/// online-schema-change tools' atomic RENAME): the table was replaced by its altered copy,
/// the same rows. (CREATE OR REPLACE keeps its Dropped + Created: the rows are gone.)
fn collapse_swaps(changes: &mut Vec<TableChange>) {
    let mut i = 0;
    while i < changes.len() {
        if let TableChange::Created(t) = &changes[i] {
            let id = t.id();
            if let Some(j) = changes[..i]
                .iter()
                .position(|c| matches!(c, TableChange::Dropped(d) if *d == id))
            {
                let TableChange::Created(t) = changes.remove(i) else {
                    unreachable!()
                };
                changes[j] = TableChange::Altered(t);
                continue;
            }
        }
        i += 1;
    }
}

// ---------------------------------------------------------------------------------------
// Tokens

#[derive(Clone, Debug, PartialEq)]
enum K {
    /// Unquoted word (keyword or identifier).
    Word,
    /// `backquoted` identifier.
    Quoted,
    /// '…' or "…" string, unescaped.
    Str,
    Num,
    /// x'…' / 0x… (text: the hex digits).
    Hex,
    /// b'…' / 0b… (text: the bits).
    Bits,
    Sym,
}

#[derive(Clone, Debug)]
struct Tok {
    k: K,
    text: String,
}

fn lex(sql: &str) -> Result<Vec<Tok>, String> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut exec_comments = 0usize;
    let tok = |k: K, text: String| Tok { k, text };
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            // `/*!NNNNN code */` and `/*M!NNNNN code */`: code the server runs.
            let mut j = i + 2;
            if b.get(j) == Some(&b'M') && b.get(j + 1) == Some(&b'!') {
                j += 1;
            }
            if b.get(j) == Some(&b'!') {
                j += 1;
                let digits = b[j..]
                    .iter()
                    .take(6)
                    .take_while(|d| d.is_ascii_digit())
                    .count();
                i = j + digits;
                exec_comments += 1;
            } else {
                match sql[i + 2..].find("*/") {
                    Some(e) => i = i + 2 + e + 2,
                    None => return Err("unterminated comment".into()),
                }
            }
        } else if c == b'*' && b.get(i + 1) == Some(&b'/') && exec_comments > 0 {
            exec_comments -= 1;
            i += 2;
        } else if c == b'#'
            || (c == b'-'
                && b.get(i + 1) == Some(&b'-')
                && b.get(i + 2).is_none_or(|c| c.is_ascii_whitespace()))
        {
            i = sql[i..].find('\n').map(|e| i + e + 1).unwrap_or(b.len());
        } else if c == b'`' {
            let (s, n) = quoted(&sql[i..], '`')?;
            out.push(tok(K::Quoted, s));
            i += n;
        } else if c == b'\'' || c == b'"' {
            let (s, n) = quoted(&sql[i..], c as char)?;
            out.push(tok(K::Str, s));
            i += n;
        } else if (c == b'x' || c == b'X' || c == b'b' || c == b'B') && b.get(i + 1) == Some(&b'\'')
        {
            let (s, n) = quoted(&sql[i + 1..], '\'')?;
            let k = if c == b'x' || c == b'X' {
                K::Hex
            } else {
                K::Bits
            };
            out.push(tok(k, s));
            i += 1 + n;
        } else if c == b'0'
            && matches!(b.get(i + 1), Some(b'x') | Some(b'b'))
            && b.get(i + 2).is_some_and(|d| d.is_ascii_hexdigit())
        {
            let hex = b[i + 1] == b'x';
            let n = b[i + 2..]
                .iter()
                .take_while(|d| d.is_ascii_alphanumeric())
                .count();
            let s = sql[i + 2..i + 2 + n].to_string();
            out.push(tok(if hex { K::Hex } else { K::Bits }, s));
            i += 2 + n;
        } else if c.is_ascii_digit()
            || (c == b'.' && b.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            let start = i;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
                i += 1;
            }
            if i < b.len()
                && (b[i] == b'e' || b[i] == b'E')
                && (b.get(i + 1).is_some_and(|d| d.is_ascii_digit())
                    || (matches!(b.get(i + 1), Some(b'+') | Some(b'-'))
                        && b.get(i + 2).is_some_and(|d| d.is_ascii_digit())))
            {
                i += 2;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
            }
            // An identifier may start with digits (`1abc`).
            if i < b.len() && is_word_byte(b[i]) {
                while i < b.len() && is_word_byte(b[i]) {
                    i += 1;
                }
                out.push(tok(K::Word, sql[start..i].to_string()));
            } else {
                out.push(tok(K::Num, sql[start..i].to_string()));
            }
        } else if is_word_byte(c) {
            let start = i;
            while i < b.len() && is_word_byte(b[i]) {
                i += 1;
            }
            out.push(tok(K::Word, sql[start..i].to_string()));
        } else {
            // Multi-byte operators do not matter to DDL; keep `<`, `=`, … one by one.
            let ch = sql[i..].chars().next().unwrap_or('?');
            out.push(tok(K::Sym, ch.to_string()));
            i += ch.len_utf8();
        }
    }
    Ok(out)
}

fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
}

/// A quoted token at the start of `s` (its quote `q`): the unescaped text and the bytes
/// consumed. Doubled quotes and (for strings) backslash escapes.
fn quoted(s: &str, q: char) -> Result<(String, usize), String> {
    let mut out = String::new();
    let mut it = s.char_indices().skip(1).peekable();
    while let Some((i, c)) = it.next() {
        if c == q {
            if it.peek().map(|&(_, n)| n) == Some(q) {
                out.push(q);
                it.next();
                continue;
            }
            return Ok((out, i + c.len_utf8()));
        }
        if c == '\\' && q != '`' {
            if let Some((_, n)) = it.next() {
                let c = match n {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    '0' => '\0',
                    'b' => '\u{8}',
                    'Z' => '\u{1a}',
                    // `\%` and `\_` keep their backslash (LIKE patterns).
                    '%' | '_' => {
                        out.push('\\');
                        n
                    }
                    other => other,
                };
                out.push(c);
            }
            continue;
        }
        out.push(c);
    }
    Err(format!("unterminated {q}-quoted text"))
}

// ---------------------------------------------------------------------------------------
// Parser helpers

struct P<'t> {
    t: &'t [Tok],
    i: usize,
}

impl<'t> P<'t> {
    fn peek(&self) -> Option<&'t Tok> {
        self.t.get(self.i)
    }
    fn peek_at(&self, n: usize) -> Option<&'t Tok> {
        self.t.get(self.i + n)
    }
    fn done(&self) -> bool {
        self.i >= self.t.len() || self.is_sym(";")
    }
    fn is_kw(&self, kw: &str) -> bool {
        self.kw_at(0, kw)
    }
    fn kw_at(&self, n: usize, kw: &str) -> bool {
        self.peek_at(n)
            .is_some_and(|t| t.k == K::Word && t.text.eq_ignore_ascii_case(kw))
    }
    fn eat_kw(&mut self, kw: &str) -> bool {
        let hit = self.is_kw(kw);
        if hit {
            self.i += 1;
        }
        hit
    }
    fn eat_kws(&mut self, kws: &[&str]) -> bool {
        if kws.iter().enumerate().all(|(n, k)| self.kw_at(n, k)) {
            self.i += kws.len();
            true
        } else {
            false
        }
    }
    fn is_sym(&self, s: &str) -> bool {
        self.peek().is_some_and(|t| t.k == K::Sym && t.text == s)
    }
    fn eat_sym(&mut self, s: &str) -> bool {
        let hit = self.is_sym(s);
        if hit {
            self.i += 1;
        }
        hit
    }
    fn expect_sym(&mut self, s: &str) -> Result<(), String> {
        if self.eat_sym(s) {
            Ok(())
        } else {
            Err(format!("expected `{s}` {}", self.here()))
        }
    }
    fn expect_kw(&mut self, kw: &str) -> Result<(), String> {
        if self.eat_kw(kw) {
            Ok(())
        } else {
            Err(format!("expected {kw} {}", self.here()))
        }
    }
    fn here(&self) -> String {
        match self.peek() {
            Some(t) => format!("at `{}`", t.text),
            None => "at the end".into(),
        }
    }
    /// An identifier: a word, a backquoted name, or (as MySQL allows in names) a string.
    fn ident(&mut self) -> Result<String, String> {
        match self.peek() {
            Some(t) if matches!(t.k, K::Word | K::Quoted | K::Str) => {
                self.i += 1;
                Ok(t.text.clone())
            }
            _ => Err(format!("expected a name {}", self.here())),
        }
    }
    /// `name` or `db.name`.
    fn qname(&mut self) -> Result<(Option<String>, String), String> {
        let a = self.ident()?;
        if self.is_sym(".") {
            self.i += 1;
            let b = self.ident()?;
            return Ok((Some(a), b));
        }
        Ok((None, a))
    }
    /// Skips one token, or a whole parenthesised group.
    fn skip_one(&mut self) {
        if self.is_sym("(") {
            self.skip_group();
        } else {
            self.i += 1;
        }
    }
    /// At `(`: skips to after its matching `)`; returns the tokens inside.
    fn skip_group(&mut self) -> &'t [Tok] {
        let start = self.i + 1;
        let mut depth = 0usize;
        while let Some(t) = self.peek() {
            self.i += 1;
            if t.k == K::Sym {
                if t.text == "(" {
                    depth += 1;
                } else if t.text == ")" {
                    depth -= 1;
                    if depth == 0 {
                        return &self.t[start..self.i - 1];
                    }
                }
            }
        }
        &self.t[start.min(self.t.len())..]
    }
    /// Skips to the next `,` or unmatched `)` at this depth (not consuming it), or the end.
    fn skip_clause(&mut self) {
        while !self.done() && !self.is_sym(",") && !self.is_sym(")") {
            self.skip_one();
        }
    }
    /// `[=]` before an option's value.
    fn eat_eq(&mut self) {
        self.eat_sym("=");
    }
    /// A value word: name, string or number.
    fn value(&mut self) -> Result<String, String> {
        match self.peek() {
            Some(t) if matches!(t.k, K::Word | K::Quoted | K::Str | K::Num) => {
                self.i += 1;
                Ok(t.text.clone())
            }
            _ => Err(format!("expected a value {}", self.here())),
        }
    }
    /// `WAIT n` / `NOWAIT` (MariaDB).
    fn eat_wait(&mut self) {
        if self.is_kw("WAIT") && self.peek_at(1).is_some_and(|t| t.k == K::Num) {
            self.i += 2;
        } else {
            self.eat_kw("NOWAIT");
        }
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

    /// CREATE DATABASE / ALTER DATABASE: the database's default character set.
    fn database_options(&mut self, p: &mut P, create: bool) -> Result<(), String> {
        let if_not_exists = create && p.eat_kws(&["IF", "NOT", "EXISTS"]);
        let db = if create
            || !(p.is_kw("DEFAULT")
                || p.is_kw("CHARACTER")
                || p.is_kw("CHARSET")
                || p.is_kw("COLLATE"))
        {
            p.ident()?
        } else {
            match self.current_db {
                Some(d) => d.to_string(),
                None => return Ok(()),
            }
        };
        if if_not_exists && self.s.default_charsets.contains_key(&db) {
            return Ok(()); // the server left the existing database as it was
        }
        let (charset, collation) = charset_options(p)?;
        let cs = charset.or(collation.map(|c| charset_of_collation(&c)));
        match cs {
            Some(cs) => self.s.set_default_charset(&db, &cs),
            None if create => {
                // Without a charset the database takes the server's.
                if let Some(cs) = self.s.server_charset.clone() {
                    self.s.set_default_charset(&db, &cs);
                }
            }
            None => return Ok(()),
        }
        self.effect.schemas_changed = true;
        Ok(())
    }

    fn drop_database(&mut self, db: &str) {
        if let Some(tables) = self.s.tables.remove(db) {
            for k in tables.into_values().filter(|k| k.captured) {
                self.effect.changes.push(TableChange::Dropped(k.table.id()));
            }
            self.effect.schemas_changed = true;
        }
        if self.s.default_charsets.remove(db).is_some() {
            self.effect.schemas_changed = true;
        }
    }

    fn drop_tables(&mut self, p: &mut P) -> Result<(), DdlError> {
        p.eat_kws(&["IF", "EXISTS"]);
        let mut ids = Vec::new();
        loop {
            let q = p.qname().map_err(|e| self.err(None, e))?;
            ids.push(self.resolve(q)?);
            if !p.eat_sym(",") {
                break;
            }
        }
        for id in ids {
            if let Some(k) = self.s.take(&id.schema, &id.name) {
                self.effect.schemas_changed = true;
                if k.captured {
                    self.effect.changes.push(TableChange::Dropped(id));
                }
            }
        }
        Ok(())
    }

    fn rename_tables(&mut self, p: &mut P) -> Result<(), DdlError> {
        p.eat_kws(&["IF", "EXISTS"]);
        let mut pairs = Vec::new();
        loop {
            let from = p.qname().map_err(|e| self.err(None, e))?;
            p.eat_wait();
            p.expect_kw("TO").map_err(|e| self.err(None, e))?;
            let to = p.qname().map_err(|e| self.err(None, e))?;
            pairs.push((self.resolve(from)?, self.resolve(to)?));
            if !p.eat_sym(",") {
                break;
            }
        }
        // Check first (so that an error changes nothing): follow the names through the
        // renames without moving schemas.
        let mut names: Vec<(TableId, bool)> = Vec::new(); // (current name, known)
        let known_now = |names: &Vec<(TableId, bool)>, s: &Schemas, id: &TableId| {
            names
                .iter()
                .rev()
                .find(|(n, _)| n == id)
                .map(|&(_, k)| k)
                .unwrap_or_else(|| s.known(&id.schema, &id.name).is_some())
        };
        for (from, to) in &pairs {
            let known = known_now(&names, self.s, from);
            if !known && self.filter.includes(to) {
                return Err(self.err(
                    Some(to),
                    format!(
                        "{from} is renamed onto the captured name {to}, but its schema is unknown \
                         (it was created outside the captured databases or before the source's \
                         schema history began)"
                    ),
                ));
            }
            names.push((from.clone(), false));
            names.push((to.clone(), known));
        }
        for (from, to) in pairs {
            self.rename_one(&from, &to);
        }
        collapse_swaps(&mut self.effect.changes);
        Ok(())
    }

    /// Moves the schema at `from` (if known) to `to`; records captured-name changes.
    fn rename_one(&mut self, from: &TableId, to: &TableId) {
        let Some(k) = self.s.take(&from.schema, &from.name) else {
            return;
        };
        self.effect.schemas_changed = true;
        let was_captured = k.captured;
        let mut table = k.table;
        table.database = to.schema.clone();
        table.name = to.name.clone();
        let captured = self.filter.includes(to);
        match (was_captured, captured) {
            (true, true) => self.effect.changes.push(TableChange::Renamed {
                from: from.clone(),
                to: to.clone(),
                table: table.clone(),
            }),
            (true, false) => self.effect.changes.push(TableChange::Dropped(from.clone())),
            (false, true) => self
                .effect
                .changes
                .push(TableChange::Created(table.clone())),
            (false, false) => {}
        }
        self.s.put(table, k.charset, captured);
    }

    fn create_table(&mut self, p: &mut P, or_replace: bool) -> Result<(), DdlError> {
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

    fn alter_table(&mut self, p: &mut P) -> Result<(), DdlError> {
        p.eat_kws(&["IF", "EXISTS"]);
        let q = p.qname().map_err(|e| self.err(None, e))?;
        let id = self.resolve(q)?;
        let captured = self.filter.includes(&id);
        let Some(known) = self.s.known(&id.schema, &id.name).cloned() else {
            if captured {
                return Err(self.err(
                    Some(&id),
                    "ALTER TABLE of a captured table whose schema is unknown",
                ));
            }
            return Ok(());
        };
        p.eat_wait();
        let mut alt = Alter {
            table: known.table,
            charset: known.charset,
            rename: None,
            flavor: self.s.flavor,
            legacy_ts: self.s.legacy_timestamps,
            promotable: Vec::new(),
            db_charset: self.s.default_charset(&id.schema).map(str::to_string),
        };
        let mut rename_to = None;
        match alt.clauses(p) {
            Ok(()) => {
                if let Some(q) = alt.rename.take() {
                    rename_to = Some(self.resolve(q)?);
                }
            }
            Err(reason) if known.captured => return Err(self.err(Some(&id), reason)),
            Err(reason) => {
                tracing::debug!(table = %id, %reason, "forgetting an uncaptured table whose ALTER is not understood");
                self.s.take(&id.schema, &id.name);
                self.effect.schemas_changed = true;
                return Ok(());
            }
        }
        promote_first_timestamp(&mut alt.table, &alt.promotable, self.s.flavor);
        enforce_key_not_null(&mut alt.table, self.s.flavor);
        let changed = {
            let k = self.s.known(&id.schema, &id.name).expect("checked above");
            k.table != alt.table || k.charset != alt.charset
        };
        if changed {
            self.effect.schemas_changed = true;
            if known.captured {
                self.effect
                    .changes
                    .push(TableChange::Altered(alt.table.clone()));
            }
        }
        self.s.put(alt.table, alt.charset, known.captured);
        if let Some(to) = rename_to {
            if to != id {
                if self.filter.includes(&to) || known.captured || self.s.has_captured_in(&to.schema)
                {
                    self.rename_one(&id, &to);
                } else {
                    self.s.take(&id.schema, &id.name);
                    self.effect.schemas_changed = true;
                }
            }
        }
        Ok(())
    }
}

/// `[DEFAULT] CHARACTER SET [=] x`, `[DEFAULT] CHARSET [=] x`, `[DEFAULT] COLLATE [=] y`
/// (and other options, skipped) up to the end.
fn charset_options(p: &mut P) -> Result<(Option<String>, Option<String>), String> {
    let (mut cs, mut coll) = (None, None);
    while !p.done() {
        p.eat_kw("DEFAULT");
        if p.eat_kws(&["CHARACTER", "SET"]) || p.eat_kw("CHARSET") {
            p.eat_eq();
            cs = Some(normalize_charset(&p.value()?));
        } else if p.eat_kw("COLLATE") {
            p.eat_eq();
            coll = Some(p.value()?.to_ascii_lowercase());
        } else {
            p.skip_one();
        }
        p.eat_sym(",");
    }
    Ok((cs, coll))
}

// ---------------------------------------------------------------------------------------
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
        p.eat_kw("DEFAULT");
        if p.eat_kws(&["CHARACTER", "SET"]) || p.eat_kw("CHARSET") {
            p.eat_eq();
            cs = Some(normalize_charset(&p.value()?));
        } else if p.eat_kw("COLLATE") {
            p.eat_eq();
            coll = Some(p.value()?.to_ascii_lowercase());
        } else {
            p.skip_one();
        }
        p.eat_sym(",");
    }
    Ok((
        cs.or(coll.map(|c| charset_of_collation(&c))),
        versioned,
        false,
    ))
}

/// A table-level element that is not a column: `Some(Some(cols))` for a PRIMARY KEY,
/// `Some(None)` for other keys and constraints (skipped), `None` for a column.
fn table_element_pk(p: &mut P) -> Result<Option<Option<Vec<String>>>, String> {
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
fn fix_key_names(t: &mut MyTable) -> Result<(), String> {
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
fn enforce_key_not_null(t: &mut MyTable, flavor: Flavor) {
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

// ---------------------------------------------------------------------------------------
// ALTER TABLE

struct Alter {
    table: MyTable,
    legacy_ts: bool,
    /// Columns this statement (re)defined that [`promote_first_timestamp`] may promote.
    promotable: Vec<String>,
    charset: Option<String>,
    rename: Option<(Option<String>, String)>,
    flavor: Flavor,
    db_charset: Option<String>,
}

impl Alter {
    fn dialect(&self) -> Dialect {
        Dialect {
            flavor: self.flavor,
            legacy_ts: self.legacy_ts,
        }
    }

    fn table_cs(&self) -> Option<String> {
        self.charset.clone().or_else(|| self.db_charset.clone())
    }

    fn col_index(&self, name: &str) -> Option<usize> {
        self.table
            .columns
            .iter()
            .position(|c| c.name.eq_ignore_ascii_case(name))
    }

    fn clauses(&mut self, p: &mut P) -> Result<(), String> {
        while !p.done() {
            if p.is_kw("PARTITION")
                || p.is_kw("REMOVE")
                || p.kw_at(1, "PARTITION")
                || p.kw_at(1, "PARTITIONING")
            {
                // Partitioning (`COALESCE PARTITION 2`, `DROP PARTITION p1, p2`, …) comes
                // last and changes no column: the rest of the statement.
                return Ok(());
            }
            self.clause(p)?;
            if !p.eat_sym(",") {
                // Options may follow without a comma (`ENGINE=InnoDB ROW_FORMAT=…`).
                if p.done() || p.is_kw("PARTITION") || p.is_kw("REMOVE") {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn position(&mut self, p: &mut P) -> Result<Option<usize>, String> {
        if p.eat_kw("FIRST") {
            return Ok(Some(0));
        }
        if p.eat_kw("AFTER") {
            let after = p.ident()?;
            let i = self
                .col_index(&after)
                .ok_or_else(|| format!("AFTER `{after}`: no such column"))?;
            return Ok(Some(i + 1));
        }
        Ok(None)
    }

    fn clause(&mut self, p: &mut P) -> Result<(), String> {
        let flavor = self.flavor;
        if p.eat_kw("ADD") {
            if p.eat_kw("PARTITION")
                || p.is_kw("INDEX")
                || p.is_kw("KEY")
                || p.is_kw("FULLTEXT")
                || p.is_kw("SPATIAL")
                || p.is_kw("UNIQUE")
                || p.is_kw("FOREIGN")
                || p.is_kw("CHECK")
                || (p.is_kw("PERIOD") && p.kw_at(1, "FOR"))
            {
                p.skip_clause();
                return Ok(());
            }
            if p.is_kws2("SYSTEM", "VERSIONING") {
                return Err("ADD SYSTEM VERSIONING is not supported".into());
            }
            if p.is_kw("CONSTRAINT") || p.is_kw("PRIMARY") {
                if let Some(pk) = table_element_pk(p)? {
                    if let Some(pk) = pk {
                        self.table.key = pk;
                        fix_key_names(&mut self.table)?;
                    }
                    return Ok(());
                }
            }
            p.eat_kw("COLUMN");
            let if_not_exists = p.eat_kws(&["IF", "NOT", "EXISTS"]);
            let cs = self.table_cs();
            if p.eat_sym("(") {
                loop {
                    let def = column_def(p, self.dialect(), cs.as_deref())?;
                    self.add_column(def, if_not_exists, None)?;
                    if !p.eat_sym(",") {
                        break;
                    }
                }
                p.expect_sym(")")?;
                return Ok(());
            }
            let def = column_def(p, self.dialect(), cs.as_deref())?;
            let pos = self.position(p)?;
            return self.add_column(def, if_not_exists, pos);
        }
        if p.eat_kw("DROP") {
            if p.eat_kws(&["PRIMARY", "KEY"]) {
                self.table.key.clear();
                return Ok(());
            }
            if [
                "INDEX",
                "KEY",
                "FOREIGN",
                "CONSTRAINT",
                "CHECK",
                "PARTITION",
                "PERIOD",
            ]
            .iter()
            .any(|k| p.is_kw(k))
            {
                p.skip_clause();
                return Ok(());
            }
            if p.is_kws2("SYSTEM", "VERSIONING") {
                return Err("DROP SYSTEM VERSIONING is not supported".into());
            }
            p.eat_kw("COLUMN");
            let if_exists = p.eat_kws(&["IF", "EXISTS"]);
            let name = p.ident()?;
            p.eat_kw("RESTRICT");
            p.eat_kw("CASCADE");
            match self.col_index(&name) {
                Some(i) => {
                    let c = self.table.columns.remove(i);
                    self.table.key.retain(|k| !k.eq_ignore_ascii_case(&c.name));
                }
                None if if_exists => {}
                None => return Err(format!("DROP COLUMN `{name}`: no such column")),
            }
            return Ok(());
        }
        if p.eat_kw("MODIFY") {
            p.eat_kw("COLUMN");
            let if_exists = p.eat_kws(&["IF", "EXISTS"]);
            let cs = self.table_cs();
            let def = column_def(p, self.dialect(), cs.as_deref())?;
            let pos = self.position(p)?;
            let old = def.column.name.clone();
            return self.replace_column(&old, def, pos, if_exists);
        }
        if p.eat_kw("CHANGE") {
            p.eat_kw("COLUMN");
            let if_exists = p.eat_kws(&["IF", "EXISTS"]);
            let old = p.ident()?;
            let cs = self.table_cs();
            let def = column_def(p, self.dialect(), cs.as_deref())?;
            let pos = self.position(p)?;
            return self.replace_column(&old, def, pos, if_exists);
        }
        if p.eat_kw("ALTER") {
            if ["INDEX", "KEY", "CHECK", "CONSTRAINT"]
                .iter()
                .any(|k| p.is_kw(k))
            {
                p.skip_clause();
                return Ok(());
            }
            p.eat_kw("COLUMN");
            let if_exists = p.eat_kws(&["IF", "EXISTS"]);
            let name = p.ident()?;
            let Some(i) = self.col_index(&name) else {
                if if_exists {
                    p.skip_clause();
                    return Ok(());
                }
                return Err(format!("ALTER COLUMN `{name}`: no such column"));
            };
            if p.eat_kws(&["SET", "DEFAULT"]) {
                let d = default_value(p)?;
                let c = &mut self.table.columns[i];
                c.default = default_text(flavor, &TypeInfo::of(c), d, c.nullable);
            } else if p.eat_kws(&["DROP", "DEFAULT"]) {
                let c = &mut self.table.columns[i];
                c.default = drop_default(flavor, c.nullable);
            } else {
                p.skip_clause(); // SET [IN]VISIBLE
            }
            return Ok(());
        }
        if p.eat_kw("RENAME") {
            if p.eat_kw("COLUMN") {
                let old = p.ident()?;
                p.expect_kw("TO")?;
                let new = p.ident()?;
                let i = self
                    .col_index(&old)
                    .ok_or_else(|| format!("RENAME COLUMN `{old}`: no such column"))?;
                let old_name = std::mem::replace(&mut self.table.columns[i].name, new.clone());
                for k in &mut self.table.key {
                    if k.eq_ignore_ascii_case(&old_name) {
                        *k = new.clone();
                    }
                }
                return Ok(());
            }
            if p.is_kw("INDEX") || p.is_kw("KEY") {
                p.skip_clause();
                return Ok(());
            }
            if !p.eat_kw("TO") {
                p.eat_kw("AS");
            }
            self.rename = Some(p.qname()?);
            return Ok(());
        }
        if p.eat_kws(&["ORDER", "BY"]) {
            // `ORDER BY a, b DESC`: its commas are not clause separators.
            loop {
                p.qname()?;
                let _ = p.eat_kw("ASC") || p.eat_kw("DESC");
                if !(p.is_sym(",")
                    && p.peek_at(1)
                        .is_some_and(|t| t.k != K::Word || !is_clause_word(&t.text)))
                {
                    break;
                }
                p.i += 1;
            }
            return Ok(());
        }
        if p.eat_kw("CONVERT") {
            p.expect_kw("TO")?;
            if !(p.eat_kws(&["CHARACTER", "SET"]) || p.eat_kw("CHARSET")) {
                return Err(format!("CONVERT TO: expected CHARACTER SET {}", p.here()));
            }
            p.eat_eq();
            let mut cs = normalize_charset(&p.value()?);
            if cs == "default" {
                cs = self
                    .db_charset
                    .clone()
                    .ok_or("CONVERT TO CHARACTER SET DEFAULT: the database's charset is unknown")?;
            }
            if p.eat_kw("COLLATE") {
                p.eat_eq();
                p.value()?;
            }
            for c in &mut self.table.columns {
                convert_column(c, &cs, flavor);
            }
            self.charset = Some(cs);
            return Ok(());
        }
        // Table options, one or several without commas.
        let mut any = false;
        loop {
            let start = p.i;
            p.eat_kw("DEFAULT");
            if p.eat_kws(&["CHARACTER", "SET"]) || p.eat_kw("CHARSET") {
                p.eat_eq();
                let cs = normalize_charset(&p.value()?);
                self.charset = Some(if cs == "default" {
                    self.db_charset.clone().unwrap_or(cs)
                } else {
                    cs
                });
            } else if p.eat_kw("COLLATE") {
                p.eat_eq();
                self.charset = Some(charset_of_collation(&p.value()?));
            } else {
                p.i = start;
                if !IGNORED_ALTER.iter().any(|k| p.is_kw(k)) {
                    break;
                }
                p.i += 1;
                // The option's value(s): to the next clause.
                while !p.done()
                    && !p.is_sym(",")
                    && !IGNORED_ALTER.iter().any(|k| p.is_kw(k))
                    && !p.is_kw("PARTITION")
                    && !p.is_kw("REMOVE")
                    && !p.is_kw("DEFAULT")
                    && !p.is_kw("CHARACTER")
                    && !p.is_kw("CHARSET")
                    && !p.is_kw("COLLATE")
                {
                    p.skip_one();
                }
            }
            any = true;
            if p.done() || p.is_sym(",") {
                break;
            }
        }
        if any {
            return Ok(());
        }
        Err(format!("an ALTER TABLE clause not understood {}", p.here()))
    }

    fn add_column(
        &mut self,
        def: ColDef,
        if_not_exists: bool,
        pos: Option<usize>,
    ) -> Result<(), String> {
        if self.col_index(&def.column.name).is_some() {
            if if_not_exists {
                return Ok(());
            }
            return Err(format!(
                "ADD COLUMN `{}`: the column exists",
                def.column.name
            ));
        }
        let at = pos.unwrap_or(self.table.columns.len());
        if def.promotable {
            self.promotable.push(def.column.name.clone());
        }
        if def.primary {
            self.table.key = vec![def.column.name.clone()];
        }
        self.table.columns.insert(at, def.column);
        Ok(())
    }

    fn replace_column(
        &mut self,
        old: &str,
        def: ColDef,
        pos: Option<usize>,
        if_exists: bool,
    ) -> Result<(), String> {
        let Some(i) = self.col_index(old) else {
            if if_exists {
                return Ok(());
            }
            return Err(format!("column `{old}` does not exist"));
        };
        let old_name = self.table.columns.remove(i).name;
        let new_name = def.column.name.clone();
        for k in &mut self.table.key {
            if k.eq_ignore_ascii_case(&old_name) {
                *k = new_name.clone();
            }
        }
        if def.primary {
            self.table.key = vec![new_name.clone()];
        }
        if def.promotable {
            self.promotable.push(new_name);
        }
        let at = match pos {
            // AFTER counts positions with the column removed.
            Some(at) if at > i && pos != Some(0) => {
                // `position` was computed before the removal.
                at - 1
            }
            Some(at) => at,
            None => i,
        };
        self.table
            .columns
            .insert(at.min(self.table.columns.len()), def.column);
        Ok(())
    }
}

/// ALTER TABLE clauses that change nothing the source models.
const IGNORED_ALTER: &[&str] = &[
    "ENGINE",
    "AUTO_INCREMENT",
    "COMMENT",
    "ROW_FORMAT",
    "ALGORITHM",
    "LOCK",
    "FORCE",
    "ENABLE",
    "DISABLE",
    "DISCARD",
    "IMPORT",
    "WITH",
    "WITHOUT",
    "KEY_BLOCK_SIZE",
    "STATS_PERSISTENT",
    "STATS_AUTO_RECALC",
    "STATS_SAMPLE_PAGES",
    "PACK_KEYS",
    "CHECKSUM",
    "TABLE_CHECKSUM",
    "DELAY_KEY_WRITE",
    "MAX_ROWS",
    "MIN_ROWS",
    "AVG_ROW_LENGTH",
    "PAGE_CHECKSUM",
    "PAGE_COMPRESSED",
    "PAGE_COMPRESSION_LEVEL",
    "TRANSACTIONAL",
    "ENCRYPTED",
    "ENCRYPTION",
    "ENCRYPTION_KEY_ID",
    "IETF_QUOTES",
    "INSERT_METHOD",
    "UNION",
    "DATA",
    "INDEX",
    "CONNECTION",
    "PASSWORD",
    "COMPRESSION",
    "SECONDARY_ENGINE",
    "SEQUENCE",
    "TABLESPACE",
    "STORAGE",
    "ENGINE_ATTRIBUTE",
    "SECONDARY_ENGINE_ATTRIBUTE",
    "AUTOEXTEND_SIZE",
];

/// Words that start an ALTER TABLE clause (after an `ORDER BY` list's comma).
fn is_clause_word(w: &str) -> bool {
    [
        "ADD", "DROP", "MODIFY", "CHANGE", "ALTER", "RENAME", "CONVERT",
    ]
    .iter()
    .chain(IGNORED_ALTER)
    .any(|k| w.eq_ignore_ascii_case(k))
}

impl P<'_> {
    fn is_kws2(&self, a: &str, b: &str) -> bool {
        self.is_kw(a) && self.kw_at(1, b)
    }
}

// ---------------------------------------------------------------------------------------
// Column definitions

struct ColDef {
    column: MyColumn,
    /// A legacy TIMESTAMP (see [`promote_first_timestamp`]) declared NOT NULL without a
    /// default or ON UPDATE.
    promotable: bool,
    /// Inline PRIMARY KEY (or bare KEY).
    primary: bool,
}

/// The parsed type of a column, before printing.
#[derive(Clone, Debug, Default)]
struct TypeSpec {
    /// Canonical `DATA_TYPE` before charset effects (`int`, `varchar`, `text`, …).
    base: String,
    len: Option<u64>,
    scale: Option<u64>,
    values: Vec<String>,
    unsigned: bool,
    zerofill: bool,
    charset: Option<String>,
    collate: Option<String>,
    /// `bool`: `tinyint(1)`.
    boolean: bool,
    serial: bool,
    json: bool,
    /// An explicit `(n)` on an integer type.
    width_given: bool,
}

/// How the server reads column definitions.
#[derive(Clone, Copy, Debug)]
struct Dialect {
    flavor: Flavor,
    /// `explicit_defaults_for_timestamp = OFF`.
    legacy_ts: bool,
}

impl Schemas {
    fn dialect(&self) -> Dialect {
        Dialect {
            flavor: self.flavor,
            legacy_ts: self.legacy_timestamps,
        }
    }
}

/// With `explicit_defaults_for_timestamp = OFF`, the table's first TIMESTAMP column, when
/// this statement defined it NOT NULL without a default or ON UPDATE, defaults to the
/// current time (the others got the zero timestamp in [`column_def`]).
fn promote_first_timestamp(t: &mut MyTable, promotable: &[String], flavor: Flavor) {
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

fn column_def(p: &mut P, dialect: Dialect, table_cs: Option<&str>) -> Result<ColDef, String> {
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

/// A column type as the server prints it.
struct TypeInfo {
    data_type: String,
    /// The declared length / display width (`char(n)`, `int(n)`), as printed.
    len: Option<u64>,
    column_type: String,
    charset: Option<String>,
    /// Fractional-second digits of temporal types, the scale of decimals.
    scale: u64,
}

impl TypeInfo {
    fn of(c: &MyColumn) -> TypeInfo {
        TypeInfo::new(
            c.data_type.clone(),
            c.column_type.clone(),
            c.charset.clone(),
        )
    }

    /// Length and scale read back from the printed type (`decimal(10,2)`, `time(3)`,
    /// `int(5) unsigned zerofill`).
    fn new(data_type: String, column_type: String, charset: Option<String>) -> TypeInfo {
        let nums: Vec<u64> = if matches!(data_type.as_str(), "enum" | "set") {
            Vec::new()
        } else {
            column_type
                .split_once('(')
                .and_then(|(_, r)| r.split_once(')'))
                .map(|(inner, _)| {
                    inner
                        .split(',')
                        .filter_map(|n| n.trim().parse().ok())
                        .collect()
                })
                .unwrap_or_default()
        };
        let scale = match data_type.as_str() {
            "decimal" | "float" | "double" => nums.get(1).copied().unwrap_or(0),
            "time" | "datetime" | "timestamp" => nums.first().copied().unwrap_or(0),
            _ => 0,
        };
        TypeInfo {
            len: nums.first().copied(),
            data_type,
            column_type,
            charset,
            scale,
        }
    }
}

/// The bytes per character of a character set (for TEXT sizing).
fn mbmaxlen(cs: &str) -> u64 {
    match cs {
        "utf8mb4" | "utf16" | "utf16le" | "utf32" | "gb18030" => 4,
        "utf8mb3" | "ujis" | "eucjpms" => 3,
        "ucs2" | "big5" | "sjis" | "euckr" | "gb2312" | "gbk" | "cp932" => 2,
        _ => 1,
    }
}

/// The smallest TEXT/BLOB type holding `bytes`.
fn blob_for(bytes: u64, text: bool) -> &'static str {
    match (bytes, text) {
        (0..=255, true) => "tinytext",
        (0..=255, false) => "tinyblob",
        (256..=65535, true) => "text",
        (256..=65535, false) => "blob",
        (65536..=16_777_215, true) => "mediumtext",
        (65536..=16_777_215, false) => "mediumblob",
        (_, true) => "longtext",
        (_, false) => "longblob",
    }
}

fn blob_max(t: &str) -> u64 {
    match t {
        "tinytext" | "tinyblob" => 255,
        "text" | "blob" => 65535,
        "mediumtext" | "mediumblob" => 16_777_215,
        _ => 4_294_967_295,
    }
}

fn is_textual(base: &str) -> bool {
    matches!(
        base,
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "enum" | "set"
    )
}

fn resolve_type(s: &TypeSpec, flavor: Flavor, table_cs: Option<&str>) -> TypeInfo {
    let mut base = s.base.clone();
    let mut charset = None;
    if s.json && flavor.is_mariadb() {
        // MariaDB's JSON is LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin.
        base = "longtext".into();
        charset = Some("utf8mb4".to_string());
    } else if is_textual(&base) {
        let cs = s
            .charset
            .clone()
            .or_else(|| s.collate.as_deref().map(charset_of_collation))
            .or_else(|| table_cs.map(str::to_string))
            .unwrap_or_else(|| "utf8mb4".into());
        if cs == "binary" && base != "enum" && base != "set" {
            base = match base.as_str() {
                "char" => "binary".into(),
                "varchar" => "varbinary".into(),
                t => t.replace("text", "blob"),
            };
        } else {
            if base == "text" {
                if let Some(n) = s.len {
                    base = blob_for(n * mbmaxlen(&cs), true).into();
                }
            }
            charset = Some(cs);
        }
    } else if base == "blob" {
        if let Some(n) = s.len {
            base = blob_for(n, false).into();
        }
    }
    let mysql8 = flavor == Flavor::MySql8;
    let sign = |t: String| {
        let mut t = t;
        if s.unsigned {
            t.push_str(" unsigned");
        }
        if s.zerofill {
            t.push_str(" zerofill");
        }
        t
    };
    let column_type = match base.as_str() {
        "tinyint" | "smallint" | "mediumint" | "int" | "bigint" => {
            let (signed_w, unsigned_w) = match base.as_str() {
                "tinyint" => (4, 3),
                "smallint" => (6, 5),
                "mediumint" => (9, 8),
                "int" => (11, 10),
                _ => (20, 20),
            };
            let w = s
                .len
                .unwrap_or(if s.unsigned { unsigned_w } else { signed_w });
            let keep_width = !mysql8
                || s.zerofill
                || (base == "tinyint" && s.len == Some(1) && s.width_given && !s.unsigned);
            if keep_width {
                sign(format!("{base}({w})"))
            } else {
                sign(base.clone())
            }
        }
        "bit" => format!("bit({})", s.len.unwrap_or(1)),
        "decimal" => sign(format!(
            "decimal({},{})",
            s.len.unwrap_or(10),
            s.scale.unwrap_or(0)
        )),
        "float" | "double" => match (s.len, s.scale) {
            (Some(m), Some(d)) => sign(format!("{base}({m},{d})")),
            _ => sign(base.clone()),
        },
        "time" | "datetime" | "timestamp" => match s.len {
            Some(f) if f > 0 => format!("{base}({f})"),
            _ => base.clone(),
        },
        "year" if !mysql8 => "year(4)".into(),
        "char" | "binary" => format!("{base}({})", s.len.unwrap_or(1)),
        "varchar" | "varbinary" => format!("{base}({})", s.len.unwrap_or(0)),
        "enum" | "set" => {
            let vals: Vec<String> = s
                .values
                .iter()
                .map(|v| format!("'{}'", v.trim_end_matches(' ').replace('\'', "''")))
                .collect();
            format!("{base}({})", vals.join(","))
        }
        _ => base.clone(),
    };
    TypeInfo::new(base, column_type, charset)
}

/// CONVERT TO CHARACTER SET `cs` on one column: character columns take the charset; TEXT
/// types grow to hold as many characters in the new charset.
fn convert_column(c: &mut MyColumn, cs: &str, flavor: Flavor) {
    let Some(old) = c.charset.clone() else {
        return;
    };
    if old == "binary" || !is_textual(&c.data_type) {
        return;
    }
    if cs == "binary" {
        let base = match c.data_type.as_str() {
            "char" => "binary".to_string(),
            "varchar" => "varbinary".to_string(),
            "enum" | "set" => c.data_type.clone(),
            t => t.replace("text", "blob"),
        };
        if base != c.data_type {
            c.column_type = c.column_type.replacen(&c.data_type, &base, 1);
            c.data_type = base;
            c.charset = None;
            return;
        }
    }
    if c.data_type.ends_with("text") {
        let chars = blob_max(&c.data_type) / mbmaxlen(&old);
        let new = blob_for(chars * mbmaxlen(cs), true).to_string();
        if blob_max(&new) > blob_max(&c.data_type) {
            c.column_type = new.clone();
            c.data_type = new;
        }
    }
    let _ = flavor;
    c.charset = Some(cs.to_string());
}

// ---------------------------------------------------------------------------------------
// Defaults

#[derive(Clone, Debug)]
enum DefaultValue {
    Null,
    Str(String),
    Num(String),
    Hex(String),
    Bits(String),
    /// CURRENT_TIMESTAMP / NOW() with its precision.
    Now(Option<u64>),
    /// Any other expression, as tokens.
    Expr(Vec<Tok>),
}

fn default_value(p: &mut P) -> Result<DefaultValue, String> {
    let Some(t) = p.peek() else {
        return Err("DEFAULT without a value".into());
    };
    let v = match t.k {
        K::Str => {
            p.i += 1;
            // Adjacent strings concatenate.
            let mut s = t.text.clone();
            while let Some(n) = p.peek().filter(|n| n.k == K::Str) {
                s.push_str(&n.text);
                p.i += 1;
            }
            DefaultValue::Str(s)
        }
        K::Num => {
            p.i += 1;
            DefaultValue::Num(t.text.clone())
        }
        K::Hex => {
            p.i += 1;
            DefaultValue::Hex(t.text.clone())
        }
        K::Bits => {
            p.i += 1;
            DefaultValue::Bits(t.text.clone())
        }
        K::Sym
            if (t.text == "-" || t.text == "+") && p.peek_at(1).is_some_and(|n| n.k == K::Num) =>
        {
            let n = &p.t[p.i + 1];
            p.i += 2;
            DefaultValue::Num(if t.text == "-" {
                format!("-{}", n.text)
            } else {
                n.text.clone()
            })
        }
        K::Sym if t.text == "(" => {
            let inner = p.skip_group();
            let mut q = P { t: inner, i: 0 };
            // A parenthesised literal is that literal.
            if inner.len() <= 2 {
                if let Ok(v) = default_value(&mut q) {
                    if q.i == inner.len() && !matches!(v, DefaultValue::Expr(_)) {
                        return Ok(v);
                    }
                }
            }
            if let Some(now) = now_call(&mut P { t: inner, i: 0 }, inner.len()) {
                return Ok(now);
            }
            DefaultValue::Expr(inner.to_vec())
        }
        K::Word => {
            let w = t.text.to_ascii_uppercase();
            match w.as_str() {
                "NULL" => {
                    p.i += 1;
                    DefaultValue::Null
                }
                "TRUE" => {
                    p.i += 1;
                    DefaultValue::Num("1".into())
                }
                "FALSE" => {
                    p.i += 1;
                    DefaultValue::Num("0".into())
                }
                _ if w.starts_with('_') && p.peek_at(1).is_some_and(|n| n.k == K::Str) => {
                    // A charset introducer: `_utf8mb4'x'`.
                    p.i += 1;
                    return default_value(p);
                }
                "N" if p.peek_at(1).is_some_and(|n| n.k == K::Str) => {
                    p.i += 1;
                    return default_value(p);
                }
                _ => {
                    let start = p.i;
                    if let Some(now) = now_call(p, usize::MAX) {
                        return Ok(now);
                    }
                    p.i = start + 1;
                    if p.is_sym("(") {
                        p.skip_group();
                    }
                    DefaultValue::Expr(p.t[start..p.i].to_vec())
                }
            }
        }
        _ => return Err(format!("DEFAULT: unexpected `{}`", t.text)),
    };
    Ok(v)
}

/// `CURRENT_TIMESTAMP[(n)]`, `NOW([n])`, `LOCALTIME[(n)]`, `LOCALTIMESTAMP[(n)]`, when it
/// spans the tokens up to `end` (or just starts there, for `usize::MAX`).
fn now_call(p: &mut P, end: usize) -> Option<DefaultValue> {
    let t = p.peek()?;
    if t.k != K::Word {
        return None;
    }
    let w = t.text.to_ascii_uppercase();
    let needs_parens = w == "NOW";
    if !matches!(
        w.as_str(),
        "CURRENT_TIMESTAMP" | "NOW" | "LOCALTIME" | "LOCALTIMESTAMP"
    ) {
        return None;
    }
    let start = p.i;
    p.i += 1;
    let mut prec = None;
    if p.is_sym("(") {
        let inner = p.skip_group();
        match inner {
            [] => {}
            [n] if n.k == K::Num => prec = n.text.parse().ok(),
            _ => {
                p.i = start;
                return None;
            }
        }
    } else if needs_parens {
        p.i = start;
        return None;
    }
    if end != usize::MAX && p.i != end {
        p.i = start;
        return None;
    }
    Some(DefaultValue::Now(prec.filter(|&n| n > 0)))
}

/// The default of a column declared without DEFAULT.
fn implicit_default(flavor: Flavor, nullable: bool) -> Option<String> {
    // MariaDB (10.2.7+) reports a nullable column's implicit default as the text `NULL`;
    // MySQL as SQL NULL.
    (flavor.is_mariadb() && nullable).then(|| "NULL".to_string())
}

/// After `ALTER COLUMN … DROP DEFAULT`.
fn drop_default(flavor: Flavor, nullable: bool) -> Option<String> {
    implicit_default(flavor, nullable)
}

/// A default as `information_schema.COLUMNS.COLUMN_DEFAULT` prints it.
fn default_text(flavor: Flavor, ty: &TypeInfo, d: DefaultValue, nullable: bool) -> Option<String> {
    let maria = flavor.is_mariadb();
    let dt = ty.data_type.as_str();
    // BINARY(n) pads its default with NUL bytes to n.
    let pad = |s: &str| -> String {
        let mut s = s.to_string();
        if dt == "binary" {
            if let Some(n) = ty.len {
                while (s.len() as u64) < n {
                    s.push('\0');
                }
            }
        }
        s
    };
    let quote = |s: &str| {
        let s = pad(s);
        if maria {
            format!("'{}'", escape_literal(&s))
        } else {
            s
        }
    };
    let numeric = matches!(
        dt,
        "tinyint"
            | "smallint"
            | "mediumint"
            | "int"
            | "bigint"
            | "decimal"
            | "float"
            | "double"
            | "year"
    );
    match d {
        DefaultValue::Null => {
            implicit_default(flavor, nullable).or_else(|| maria.then(|| "NULL".into()))
        }
        DefaultValue::Now(prec) => Some(match (maria, prec) {
            (true, Some(n)) => format!("current_timestamp({n})"),
            (true, None) => "current_timestamp()".into(),
            (false, Some(n)) => format!("CURRENT_TIMESTAMP({n})"),
            (false, None) => "CURRENT_TIMESTAMP".into(),
        }),
        DefaultValue::Num(n) if numeric => Some(zerofill(ty, format_number(dt, &n, ty.scale))),
        DefaultValue::Str(s) if numeric => {
            Some(zerofill(ty, format_number(dt, s.trim(), ty.scale)))
        }
        DefaultValue::Num(n) if dt == "bit" => Some(bits_text(n.parse::<u64>().unwrap_or(0))),
        DefaultValue::Bits(b) if dt == "bit" => {
            Some(bits_text(u64::from_str_radix(&b, 2).unwrap_or(0)))
        }
        DefaultValue::Hex(h) if dt == "bit" => {
            Some(bits_text(u64::from_str_radix(&h, 16).unwrap_or(0)))
        }
        DefaultValue::Str(s) | DefaultValue::Num(s)
            if matches!(dt, "date" | "datetime" | "timestamp" | "time") =>
        {
            Some(quote(&format_temporal(dt, &s, ty.scale)))
        }
        DefaultValue::Str(s) => Some(quote(&s)),
        DefaultValue::Num(n) => Some(quote(&n)),
        DefaultValue::Hex(h) => {
            let bytes: Vec<u8> = h
                .as_bytes()
                .chunks(2)
                .filter_map(|c| u8::from_str_radix(std::str::from_utf8(c).ok()?, 16).ok())
                .collect();
            Some(quote(&String::from_utf8_lossy(&bytes)))
        }
        DefaultValue::Bits(b) => Some(quote(&b)),
        DefaultValue::Expr(toks) => {
            let e = print_expr(&toks);
            // MariaDB prints an operator expression in parentheses, a call bare.
            let operator = toks.iter().any(|t| {
                t.k == K::Sym
                    && matches!(
                        t.text.as_str(),
                        "+" | "-" | "*" | "/" | "%" | "=" | "<" | ">" | "|" | "&"
                    )
            });
            Some(
                if maria && operator && !(e.starts_with('(') && e.ends_with(')')) {
                    format!("({e})")
                } else {
                    e
                },
            )
        }
    }
}

/// A ZEROFILL column's default is printed padded to the display width.
fn zerofill(ty: &TypeInfo, n: String) -> String {
    match ty.len {
        Some(w) if ty.column_type.ends_with(" zerofill") && (n.len() as u64) < w => {
            format!("{n:0>width$}", width = w as usize)
        }
        _ => n,
    }
}

/// A string literal's text as MariaDB prints it between single quotes.
fn escape_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str("\\0"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{1a}' => out.push_str("\\Z"),
            c => out.push(c),
        }
    }
    out
}

fn bits_text(v: u64) -> String {
    format!("b'{v:b}'")
}

/// A numeric default in the column's type: integers rounded, decimals to their scale,
/// floats shortest.
fn format_number(dt: &str, s: &str, scale: u64) -> String {
    let v: f64 = s.parse().unwrap_or_else(|_| {
        // Leading numeric prefix, as the server's conversion takes.
        let n: String = s
            .chars()
            .enumerate()
            .take_while(|&(i, c)| {
                c.is_ascii_digit() || c == '.' || (i == 0 && (c == '-' || c == '+'))
            })
            .map(|(_, c)| c)
            .collect();
        n.parse().unwrap_or(0.0)
    });
    match dt {
        "decimal" => format!("{:.*}", scale as usize, v),
        "float" | "double" => {
            if scale > 0 {
                format!("{:.*}", scale as usize, v)
            } else if dt == "float" {
                format!("{}", v as f32)
            } else {
                format!("{v}")
            }
        }
        _ => {
            // Integers: exact when the text is an integer, else rounded half away.
            if let Ok(i) = s.parse::<i128>() {
                i.to_string()
            } else {
                format!("{}", v.round() as i128)
            }
        }
    }
}

/// A temporal default normalised: dates `YYYY-MM-DD`, times and datetimes with seconds and
/// the column's fractional digits.
fn format_temporal(dt: &str, s: &str, fsp: u64) -> String {
    let s = s.trim();
    let (main, frac) = match s.split_once('.') {
        Some((m, f)) => (m, f),
        None => (s, ""),
    };
    let frac_text = |f: &str| -> String {
        if fsp == 0 {
            return String::new();
        }
        let mut f: String = f.chars().take(fsp as usize).collect();
        while f.len() < fsp as usize {
            f.push('0');
        }
        format!(".{f}")
    };
    let hms = |t: &str| -> String {
        let mut parts: Vec<String> = t.split(':').map(|x| format!("{:0>2}", x)).collect();
        while parts.len() < 3 {
            parts.push("00".into());
        }
        parts.join(":")
    };
    match dt {
        "date" => main.split([' ', 'T']).next().unwrap_or(main).to_string(),
        "time" => format!("{}{}", hms(main), frac_text(frac)),
        _ => {
            let (d, t) = main.split_once([' ', 'T']).unwrap_or((main, "00:00:00"));
            format!("{d} {}{}", hms(t), frac_text(frac))
        }
    }
}

/// An expression default as the server prints it (MariaDB: lower-case function names,
/// backquoted identifiers, spaced binary operators).
fn print_expr(toks: &[Tok]) -> String {
    let mut out = String::new();
    for (i, t) in toks.iter().enumerate() {
        let next_paren = toks
            .get(i + 1)
            .is_some_and(|n| n.k == K::Sym && n.text == "(");
        match t.k {
            K::Word if next_paren => {
                // The server prints some functions under their canonical names.
                let f = t.text.to_ascii_lowercase();
                out.push_str(match f.as_str() {
                    "length" => "octet_length",
                    "character_length" => "char_length",
                    other => other,
                })
            }
            K::Word | K::Quoted => {
                if t.k == K::Word
                    && matches!(
                        t.text.to_ascii_uppercase().as_str(),
                        "AND" | "OR" | "NOT" | "IS" | "NULL" | "LIKE" | "IN" | "DIV" | "MOD"
                    )
                {
                    if !out.is_empty() && !out.ends_with(['(', ' ']) {
                        out.push(' ');
                    }
                    out.push_str(&t.text.to_ascii_lowercase());
                    out.push(' ');
                } else {
                    out.push_str(&format!("`{}`", t.text));
                }
            }
            K::Str => out.push_str(&format!(
                "'{}'",
                t.text.replace('\\', "\\\\").replace('\'', "\\'")
            )),
            K::Num => out.push_str(&t.text),
            K::Hex => out.push_str(&format!("0x{}", t.text)),
            K::Bits => out.push_str(&format!("b'{}'", t.text)),
            K::Sym => match t.text.as_str() {
                "+" | "-" | "*" | "/" | "%" | "=" | "<" | ">" | "|" | "&" => {
                    if out.ends_with(' ') {
                        out.push_str(&t.text);
                        out.push(' ');
                    } else {
                        out.push(' ');
                        out.push_str(&t.text);
                        out.push(' ');
                    }
                }
                other => {
                    if other == ")" && out.ends_with(' ') {
                        out.pop();
                    }
                    out.push_str(other);
                }
            },
        }
    }
    out.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter() -> TableFilter {
        TableFilter::new(&["d.*".into()], &["d._*".into()])
    }

    fn schemas(flavor: Flavor) -> Schemas {
        let mut s = Schemas::new(flavor);
        s.set_default_charset("d", "utf8mb4");
        s.apply_ddl(
            Some("d"),
            "CREATE TABLE t (id int PRIMARY KEY, v varchar(10))",
            &filter(),
        )
        .unwrap();
        s
    }

    fn col<'a>(s: &'a Schemas, t: &str, c: &str) -> &'a MyColumn {
        s.get("d", t)
            .unwrap()
            .columns
            .iter()
            .find(|x| x.name == c)
            .unwrap()
    }

    #[test]
    fn statements_that_are_not_ddl_on_a_captured_table_are_ignored() {
        for sql in [
            "BEGIN",
            "COMMIT",
            "SAVEPOINT a",
            "ROLLBACK TO SAVEPOINT a",
            "XA START 'x'",
            "GRANT SELECT ON *.* TO 'u'@'%'",
            "CREATE USER 'u'@'%' IDENTIFIED BY 'p'",
            "ALTER USER 'u'@'%' IDENTIFIED BY 'q'",
            "SET @a = 1",
            "FLUSH TABLES",
            "ANALYZE TABLE t",
            "CREATE VIEW v AS SELECT 1",
            "CREATE DEFINER=`root`@`%` VIEW v2 AS SELECT * FROM t",
            "ALTER VIEW v AS SELECT 2",
            "CREATE TRIGGER trg BEFORE INSERT ON t FOR EACH ROW SET @x = 1",
            "CREATE PROCEDURE p() BEGIN SELECT 1; END",
            "CREATE INDEX i ON t (v)",
            "DROP INDEX i ON t",
            "DROP VIEW v",
            "CREATE TEMPORARY TABLE tmp (a int)",
            "DROP TEMPORARY TABLE IF EXISTS tmp",
            "CREATE TABLE other.x (a int)",
            "ALTER TABLE other.x ADD b int",
            "DROP TABLE other.x",
            "",
            "# only a comment",
            "/* only a comment */",
        ] {
            let mut s = schemas(Flavor::MariaDb);
            let before = s.clone();
            let e = s.apply_ddl(Some("d"), sql, &filter()).unwrap();
            assert!(e.is_none(), "{sql}: {e:?}");
            assert!(!e.schemas_changed, "{sql}");
            assert_eq!(s, before, "{sql}");
        }
    }

    #[test]
    fn first_keyword_test_is_cheap_and_right() {
        assert!(!may_be_ddl("BEGIN"));
        assert!(!may_be_ddl("  /* x */ COMMIT"));
        assert!(may_be_ddl("/* x */ alter table t add c int"));
        assert!(may_be_ddl("-- c\nDROP TABLE t"));
        assert!(may_be_ddl("/*!40000 ALTER TABLE t DISABLE KEYS */"));
        assert!(!may_be_ddl("CREATED"));
    }

    #[test]
    fn mariadb_printing() {
        let mut s = schemas(Flavor::MariaDb);
        s.apply_ddl(
            Some("d"),
            "ALTER TABLE `d`.`t` ADD COLUMN a INT UNSIGNED NOT NULL DEFAULT '5' FIRST, \
             ADD b TIMESTAMP(3) NULL DEFAULT CURRENT_TIMESTAMP(3), ADD c ENUM('x','y''z'), \
             ADD e BOOL DEFAULT TRUE, ADD f DECIMAL(8,2) DEFAULT 1, ADD g YEAR",
            &filter(),
        )
        .unwrap();
        let t = s.get("d", "t").unwrap();
        let names: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "id", "v", "b", "c", "e", "f", "g"]);
        assert_eq!(col(&s, "t", "a").column_type, "int(10) unsigned");
        assert_eq!(col(&s, "t", "a").default.as_deref(), Some("5"));
        assert!(!col(&s, "t", "a").nullable);
        assert_eq!(
            col(&s, "t", "b").default.as_deref(),
            Some("current_timestamp(3)")
        );
        assert_eq!(col(&s, "t", "c").column_type, "enum('x','y''z')");
        assert_eq!(col(&s, "t", "c").charset.as_deref(), Some("utf8mb4"));
        assert_eq!(col(&s, "t", "c").default.as_deref(), Some("NULL"));
        assert_eq!(col(&s, "t", "e").column_type, "tinyint(1)");
        assert_eq!(col(&s, "t", "e").default.as_deref(), Some("1"));
        assert_eq!(col(&s, "t", "f").default.as_deref(), Some("1.00"));
        assert_eq!(col(&s, "t", "g").column_type, "year(4)");
        assert_eq!(col(&s, "t", "id").default, None);
        assert!(!col(&s, "t", "id").nullable);
    }

    #[test]
    fn mysql8_printing() {
        let mut s = schemas(Flavor::MySql8);
        s.apply_ddl(
            Some("d"),
            "ALTER TABLE t ADD a INT UNSIGNED DEFAULT 5, ADD b TINYINT(1), ADD c INT(10) ZEROFILL, \
             ADD e YEAR, ADF",
            &filter(),
        )
        .unwrap_err();
        s.apply_ddl(
            Some("d"),
            "ALTER TABLE t ADD a INT UNSIGNED DEFAULT 5, ADD b TINYINT(1), ADD c INT(10) ZEROFILL, \
             ADD e YEAR, ADD f JSON, ADD g VARCHAR(3) DEFAULT 'x', ADD h DATETIME DEFAULT NOW()",
            &filter(),
        )
        .unwrap();
        assert_eq!(col(&s, "t", "id").column_type, "int");
        assert_eq!(col(&s, "t", "a").column_type, "int unsigned");
        assert_eq!(col(&s, "t", "a").default.as_deref(), Some("5"));
        assert_eq!(col(&s, "t", "b").column_type, "tinyint(1)");
        assert_eq!(col(&s, "t", "b").default, None);
        assert_eq!(col(&s, "t", "c").column_type, "int(10) unsigned zerofill");
        assert_eq!(col(&s, "t", "e").column_type, "year");
        assert_eq!(col(&s, "t", "f").data_type, "json");
        assert_eq!(col(&s, "t", "f").charset, None);
        assert_eq!(col(&s, "t", "g").default.as_deref(), Some("x"));
        assert_eq!(
            col(&s, "t", "h").default.as_deref(),
            Some("CURRENT_TIMESTAMP")
        );
    }

    #[test]
    fn a_statement_not_understood_is_an_error_naming_it_and_changes_nothing() {
        let mut s = schemas(Flavor::MariaDb);
        let before = s.clone();
        let e = s
            .apply_ddl(Some("d"), "ALTER TABLE t ADD x INT, FROBNICATE", &filter())
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("ALTER TABLE t ADD x INT, FROBNICATE"),
            "{e}"
        );
        assert_eq!(e.table, Some(TableId::new("d", "t")));
        assert!(!e.is_transient());
        assert_eq!(s, before);
        let e = s
            .apply_ddl(Some("d"), "ALTER TABLE t ADD y GEOGRAPHY", &filter())
            .unwrap_err();
        assert!(e.reason.contains("geography"), "{e}");
        // A rename of a table of unknown schema onto a captured name.
        let e = s
            .apply_ddl(None, "RENAME TABLE other.x TO d.t2", &filter())
            .unwrap_err();
        assert!(e.reason.contains("unknown"), "{e}");
        // No database for an unqualified name.
        assert!(s.apply_ddl(None, "DROP TABLE t", &filter()).is_err());
        assert_eq!(s, before);
    }

    #[test]
    fn shadow_swaps_are_alterations() {
        let mut s = schemas(Flavor::MariaDb);
        let f = filter();
        let e = s
            .apply_ddl(Some("d"), "CREATE TABLE _t_gho LIKE t", &f)
            .unwrap();
        assert!(e.is_none() && e.schemas_changed);
        s.apply_ddl(Some("d"), "ALTER TABLE _t_gho ADD COLUMN z int", &f)
            .unwrap();
        let e = s
            .apply_ddl(Some("d"), "RENAME TABLE t TO _t_del, _t_gho TO t", &f)
            .unwrap();
        match &e.changes[..] {
            [TableChange::Altered(t)] => assert_eq!(t.columns.len(), 3),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.get("d", "t").unwrap().columns.len(), 3);
        let e = s.apply_ddl(Some("d"), "DROP TABLE _t_del", &f).unwrap();
        assert!(e.is_none() && e.schemas_changed);
        // A plain rename between captured names, and back out of the captured set.
        let e = s.apply_ddl(Some("d"), "RENAME TABLE t TO u", &f).unwrap();
        assert!(
            matches!(&e.changes[..], [TableChange::Renamed { .. }]),
            "{e:?}"
        );
        let e = s
            .apply_ddl(Some("d"), "ALTER TABLE u RENAME TO _u_old", &f)
            .unwrap();
        assert!(matches!(&e.changes[..], [TableChange::Dropped(_)]), "{e:?}");
        assert!(s.is_empty());
        // The state survives the schema history's serialisation.
        let back: Schemas = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn versioned_comments_partitions_and_if_not_exists() {
        let mut s = schemas(Flavor::MariaDb);
        let f = filter();
        let e = s
            .apply_ddl(
                Some("d"),
                "CREATE TABLE p (a int NOT NULL, PRIMARY KEY (a)) ENGINE=InnoDB /*!50100 PARTITION BY HASH (a) PARTITIONS 4 */",
                &f,
            )
            .unwrap();
        assert!(matches!(&e.changes[..], [TableChange::Created(t)] if t.key == ["a"]));
        let e = s
            .apply_ddl(Some("d"), "CREATE TABLE IF NOT EXISTS p (b int)", &f)
            .unwrap();
        assert!(e.is_none());
        let e = s
            .apply_ddl(
                Some("d"),
                "ALTER TABLE p ADD c int, DROP PARTITION p1, p2",
                &f,
            )
            .unwrap();
        assert!(matches!(&e.changes[..], [TableChange::Altered(t)] if t.columns.len() == 2));
        let e = s.apply_ddl(Some("d"), "TRUNCATE p", &f).unwrap();
        assert!(matches!(&e.changes[..], [TableChange::Truncated(_)]));
        let e = s
            .apply_ddl(Some("d"), "CREATE OR REPLACE TABLE p (z int)", &f)
            .unwrap();
        assert!(
            matches!(
                &e.changes[..],
                [TableChange::Dropped(_), TableChange::Created(_)]
            ),
            "{e:?}"
        );
    }

    #[test]
    fn lexing() {
        let t =
            lex("a `b``c` 'd''e\\n' \"f\" 1.5e3 x'4142' b'01' -- x\n /*!50100 g */ #h").unwrap();
        let texts: Vec<&str> = t.iter().map(|t| t.text.as_str()).collect();
        assert_eq!(
            texts,
            ["a", "b`c", "d'e\n", "f", "1.5e3", "4142", "01", "g"]
        );
        assert!(lex("'open").is_err());
    }
}
