//! DROP TABLE: the named tables' schemas are forgotten; captured ones are reported
//! [`TableChange::Dropped`].

use super::parse::P;
use super::{Ctx, DdlError, TableChange};

impl Ctx<'_> {
    pub(super) fn drop_tables(&mut self, p: &mut P) -> Result<(), DdlError> {
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
}
