//! Parser helpers: the cursor [`P`] over the tokens that every statement's recursive
//! descent reads with.
//!
//! Invariants: a `;` ends the statement ([`P::done`]); keywords compare
//! case-insensitively and only against unquoted words.

use super::lex::{Tok, K};

pub(super) struct P<'t> {
    pub(super) t: &'t [Tok],
    pub(super) i: usize,
}

impl<'t> P<'t> {
    pub(super) fn peek(&self) -> Option<&'t Tok> {
        self.t.get(self.i)
    }
    pub(super) fn peek_at(&self, n: usize) -> Option<&'t Tok> {
        self.t.get(self.i + n)
    }
    pub(super) fn done(&self) -> bool {
        self.i >= self.t.len() || self.is_sym(";")
    }
    pub(super) fn is_kw(&self, kw: &str) -> bool {
        self.kw_at(0, kw)
    }
    pub(super) fn kw_at(&self, n: usize, kw: &str) -> bool {
        self.peek_at(n)
            .is_some_and(|t| t.k == K::Word && t.text.eq_ignore_ascii_case(kw))
    }
    pub(super) fn eat_kw(&mut self, kw: &str) -> bool {
        let hit = self.is_kw(kw);
        if hit {
            self.i += 1;
        }
        hit
    }
    pub(super) fn eat_kws(&mut self, kws: &[&str]) -> bool {
        if kws.iter().enumerate().all(|(n, k)| self.kw_at(n, k)) {
            self.i += kws.len();
            true
        } else {
            false
        }
    }
    pub(super) fn is_sym(&self, s: &str) -> bool {
        self.peek().is_some_and(|t| t.k == K::Sym && t.text == s)
    }
    pub(super) fn eat_sym(&mut self, s: &str) -> bool {
        let hit = self.is_sym(s);
        if hit {
            self.i += 1;
        }
        hit
    }
    pub(super) fn expect_sym(&mut self, s: &str) -> Result<(), String> {
        if self.eat_sym(s) {
            Ok(())
        } else {
            Err(format!("expected `{s}` {}", self.here()))
        }
    }
    pub(super) fn expect_kw(&mut self, kw: &str) -> Result<(), String> {
        if self.eat_kw(kw) {
            Ok(())
        } else {
            Err(format!("expected {kw} {}", self.here()))
        }
    }
    pub(super) fn here(&self) -> String {
        match self.peek() {
            Some(t) => format!("at `{}`", t.text),
            None => "at the end".into(),
        }
    }
    /// An identifier: a word, a backquoted name, or (as MySQL allows in names) a string.
    pub(super) fn ident(&mut self) -> Result<String, String> {
        match self.peek() {
            Some(t) if matches!(t.k, K::Word | K::Quoted | K::Str) => {
                self.i += 1;
                Ok(t.text.clone())
            }
            _ => Err(format!("expected a name {}", self.here())),
        }
    }
    /// `name` or `db.name`.
    pub(super) fn qname(&mut self) -> Result<(Option<String>, String), String> {
        let a = self.ident()?;
        if self.is_sym(".") {
            self.i += 1;
            let b = self.ident()?;
            return Ok((Some(a), b));
        }
        Ok((None, a))
    }
    /// Skips one token, or a whole parenthesised group.
    pub(super) fn skip_one(&mut self) {
        if self.is_sym("(") {
            self.skip_group();
        } else {
            self.i += 1;
        }
    }
    /// At `(`: skips to after its matching `)`; returns the tokens inside. Anywhere else:
    /// consumes nothing and returns no token.
    pub(super) fn skip_group(&mut self) -> &'t [Tok] {
        if !self.is_sym("(") {
            return &[];
        }
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
    pub(super) fn skip_clause(&mut self) {
        while !self.done() && !self.is_sym(",") && !self.is_sym(")") {
            self.skip_one();
        }
    }
    /// `[=]` before an option's value.
    pub(super) fn eat_eq(&mut self) {
        self.eat_sym("=");
    }
    /// A value word: name, string or number.
    pub(super) fn value(&mut self) -> Result<String, String> {
        match self.peek() {
            Some(t) if matches!(t.k, K::Word | K::Quoted | K::Str | K::Num) => {
                self.i += 1;
                Ok(t.text.clone())
            }
            _ => Err(format!("expected a value {}", self.here())),
        }
    }
    /// `WAIT n` / `NOWAIT` (MariaDB).
    pub(super) fn eat_wait(&mut self) {
        if self.is_kw("WAIT") && self.peek_at(1).is_some_and(|t| t.k == K::Num) {
            self.i += 2;
        } else {
            self.eat_kw("NOWAIT");
        }
    }
}

impl P<'_> {
    pub(super) fn is_kws2(&self, a: &str, b: &str) -> bool {
        self.is_kw(a) && self.kw_at(1, b)
    }
}
