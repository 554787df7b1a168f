//! ALTER TABLE: its clauses applied to a copy of the known table ([`Alter`]), then the
//! result compared and stored, with the partition operations that move rows without
//! row events.
//!
//! Invariants: the copy is stored only when every clause was understood; clauses that
//! change nothing the source models ([`IGNORED_ALTER`]) are skipped.

use super::column::{column_def, promote_first_timestamp, ColDef, Dialect};
use super::create::{enforce_key_not_null, fix_key_names, table_element_pk};
use super::default::default_value;
use super::lex::K;
use super::parse::P;
use super::render::{convert_column, default_text, drop_default, TypeInfo};
use super::{Ctx, DdlError, TableChange, Target};
use crate::mysql::schema::{charset_of_collation, normalize_charset, Flavor};
use crate::mysql::table::MyTable;

impl Ctx<'_> {
    pub(super) fn alter_table(&mut self, p: &mut P) -> Result<(), DdlError> {
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
            partition_rows: None,
            exchanged_with: None,
            converted_out: None,
            converted_in: None,
            flavor: self.s.flavor,
            legacy_ts: self.s.legacy_timestamps,
            promotable: Vec::new(),
            db_charset: self.s.default_charset(&id.schema).map(str::to_string),
        };
        let (mut rename_to, mut exchanged, mut out, mut into) = (None, None, None, None);
        match alt.clauses(p) {
            Ok(()) => {
                if let Some(q) = alt.rename.take() {
                    rename_to = Some(self.resolve(q)?);
                }
                if let Some(q) = alt.exchanged_with.take() {
                    exchanged = Some(self.resolve(q)?);
                }
                if let Some(q) = alt.converted_out.take() {
                    out = Some(self.resolve(q)?);
                }
                if let Some(q) = alt.converted_in.take() {
                    into = Some(self.resolve(q)?);
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
        if let Some(op) = alt.partition_rows {
            for t in std::iter::once(&id).chain(exchanged.as_ref()) {
                if self.s.get_id(t).is_some() {
                    self.effect.changes.push(TableChange::PartitionRows {
                        table: t.clone(),
                        operation: op.into(),
                    });
                }
            }
        }
        if let Some(x) = into {
            if let Some(k) = self.s.take(&x.schema, &x.name) {
                self.effect.schemas_changed = true;
                if k.captured {
                    self.effect.changes.push(TableChange::Dropped(x));
                }
            }
        }
        if let Some(x) = out {
            let captured = matches!(self.target(&x), Target::Captured);
            if captured || matches!(self.target(&x), Target::Shadow) {
                let mut t = alt.table.clone();
                t.database = x.schema.clone();
                t.name = x.name.clone();
                if captured {
                    self.effect.changes.push(TableChange::Created(t.clone()));
                }
                self.s.put(t, alt.charset.clone(), captured);
                self.effect.schemas_changed = true;
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

// ALTER TABLE clauses

struct Alter {
    table: MyTable,
    legacy_ts: bool,
    /// Columns this statement (re)defined that [`promote_first_timestamp`] may promote.
    promotable: Vec<String>,
    charset: Option<String>,
    rename: Option<(Option<String>, String)>,
    /// A partition operation that moves rows without row events.
    partition_rows: Option<&'static str>,
    /// `EXCHANGE PARTITION p WITH TABLE x`: x.
    exchanged_with: Option<(Option<String>, String)>,
    /// `CONVERT PARTITION p TO TABLE x`: x, created with this table's schema.
    converted_out: Option<(Option<String>, String)>,
    /// `CONVERT TABLE x TO PARTITION p …`: x, gone.
    converted_in: Option<(Option<String>, String)>,
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
            if p.is_kws2("CONVERT", "PARTITION") {
                p.i += 2;
                p.ident()?;
                p.expect_kw("TO")?;
                p.expect_kw("TABLE")?;
                self.converted_out = Some(p.qname()?);
                self.partition_rows = Some("CONVERT PARTITION");
                return Ok(());
            }
            if p.is_kws2("CONVERT", "TABLE") {
                p.i += 2;
                self.converted_in = Some(p.qname()?);
                self.partition_rows = Some("CONVERT TABLE … TO PARTITION");
                return Ok(());
            }
            if p.kw_at(1, "PARTITION") {
                for op in ["DROP", "TRUNCATE", "EXCHANGE"] {
                    if p.is_kw(op) {
                        self.partition_rows = Some(match op {
                            "DROP" => "DROP PARTITION",
                            "TRUNCATE" => "TRUNCATE PARTITION",
                            _ => "EXCHANGE PARTITION",
                        });
                    }
                }
                if p.is_kw("EXCHANGE") {
                    p.i += 2;
                    p.ident()?;
                    p.expect_kw("WITH")?;
                    p.expect_kw("TABLE")?;
                    self.exchanged_with = Some(p.qname()?);
                    return Ok(());
                }
            }
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
                convert_column(c, &cs);
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
