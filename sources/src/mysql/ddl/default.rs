//! Defaults: the value of a `DEFAULT` (or `ON UPDATE`) clause as parsed, before
//! [`super::render`] prints it in the column's type.

use super::lex::{Tok, K};
use super::parse::P;

#[derive(Clone, Debug)]
pub(super) enum DefaultValue {
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

pub(super) fn default_value(p: &mut P) -> Result<DefaultValue, String> {
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
