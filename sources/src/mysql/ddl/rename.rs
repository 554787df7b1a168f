//! RENAME TABLE (and ALTER TABLE … RENAME): moving schemas between names, and what
//! that does to captured names.
//!
//! Invariants: a RENAME is checked whole before any schema moves (an error changes
//! nothing); an unknown schema renamed onto a captured name is the error.

use cdc_schemas::TableId;

use super::parse::P;
use super::{Ctx, DdlError, TableChange};
use crate::mysql::schema::Schemas;

impl Ctx<'_> {
    pub(super) fn rename_tables(&mut self, p: &mut P) -> Result<(), DdlError> {
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
    pub(super) fn rename_one(&mut self, from: &TableId, to: &TableId) {
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
                changes[j] = TableChange::Altered(t.clone());
                changes.remove(i);
                continue;
            }
        }
        i += 1;
    }
}
