//! CREATE / ALTER / DROP DATABASE: databases' default character sets (which tables
//! created later inherit) and the captured tables a dropped database takes with it.

use super::parse::P;
use super::{Ctx, TableChange};
use crate::mysql::schema::{charset_of_collation, normalize_charset};

impl Ctx<'_> {
    /// CREATE DATABASE / ALTER DATABASE: the database's default character set.
    pub(super) fn database_options(&mut self, p: &mut P, create: bool) -> Result<(), String> {
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

    pub(super) fn drop_database(&mut self, db: &str) {
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
}

/// `[DEFAULT] CHARACTER SET [=] x`, `[DEFAULT] CHARSET [=] x`, `[DEFAULT] COLLATE [=] y`
/// (and other options, skipped) up to the end.
fn charset_options(p: &mut P) -> Result<(Option<String>, Option<String>), String> {
    let (mut cs, mut coll) = (None, None);
    while !p.done() {
        charset_option(p, &mut cs, &mut coll)?;
    }
    Ok((cs, coll))
}

/// One option of a database's or a table's option list (the same grammar for both):
/// `[DEFAULT] CHARACTER SET|CHARSET [=] x` into `cs`, `[DEFAULT] COLLATE [=] y` into
/// `coll`, anything else skipped; then an optional `,`.
pub(super) fn charset_option(
    p: &mut P,
    cs: &mut Option<String>,
    coll: &mut Option<String>,
) -> Result<(), String> {
    p.eat_kw("DEFAULT");
    if p.eat_kws(&["CHARACTER", "SET"]) || p.eat_kw("CHARSET") {
        p.eat_eq();
        *cs = Some(normalize_charset(&p.value()?));
    } else if p.eat_kw("COLLATE") {
        p.eat_eq();
        *coll = Some(p.value()?.to_ascii_lowercase());
    } else {
        p.skip_one();
    }
    p.eat_sym(",");
    Ok(())
}
