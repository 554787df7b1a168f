//! Which tables are captured (sources) or applied (sinks): include and exclude patterns over `schema.table`
//! (MySQL: `database.table`). `*` matches any run of characters, `?` one character;
//! matching is case-sensitive, as Postgres identifiers are once created. An empty include
//! list means every table; an exclude match always wins.

use crate::TableId;

#[derive(Clone, Debug, Default)]
pub struct TableFilter {
    include: Vec<String>,
    exclude: Vec<String>,
}

impl TableFilter {
    pub fn new(include: &[String], exclude: &[String]) -> Self {
        TableFilter {
            include: include.to_vec(),
            exclude: exclude.to_vec(),
        }
    }

    pub fn includes(&self, t: &TableId) -> bool {
        let name = t.to_string();
        (self.include.is_empty() || self.include.iter().any(|p| glob(p, &name)))
            && !self.exclude.iter().any(|p| glob(p, &name))
    }

    /// The include patterns, for reporting ones that match nothing.
    pub fn include_patterns(&self) -> &[String] {
        &self.include
    }
}

/// True when `pattern` has a wildcard.
pub fn is_pattern(s: &str) -> bool {
    s.contains(['*', '?'])
}

/// Glob match with `*` and `?` (iterative, no backtracking blow-up).
pub fn glob(pattern: &str, s: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = s.chars().collect();
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globbing() {
        assert!(glob("public.*", "public.orders"));
        assert!(!glob("public.*", "sales.orders"));
        assert!(glob("*.ord?rs", "x.orders"));
        assert!(glob("*", ""));
        assert!(!glob("a", "ab"));
        assert!(glob("a*b*c", "a__b__c"));
        assert!(!glob("a*b*c", "a__c__b"));
    }

    #[test]
    fn include_exclude() {
        let f = TableFilter::new(&["public.*".into()], &["public.tmp_*".into()]);
        assert!(f.includes(&TableId::new("public", "orders")));
        assert!(!f.includes(&TableId::new("public", "tmp_x")));
        assert!(!f.includes(&TableId::new("other", "orders")));
        assert!(TableFilter::default().includes(&TableId::new("a", "b")));
    }
}
