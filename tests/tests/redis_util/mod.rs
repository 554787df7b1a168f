//! A minimal RESP client for the tests that read a sink's views: the tests read Redis
//! themselves, not through the sink's code.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub enum R {
    Nil,
    Str(Vec<u8>),
    Int(i64),
    Arr(Vec<R>),
    Err(String),
}

impl R {
    pub fn text(&self) -> String {
        match self {
            R::Str(b) => String::from_utf8_lossy(b).into_owned(),
            other => panic!("not a string: {other:?}"),
        }
    }
    pub fn items(self) -> Vec<R> {
        match self {
            R::Arr(v) => v,
            other => panic!("not an array: {other:?}"),
        }
    }
}

pub struct Redis(BufReader<TcpStream>);

impl Redis {
    pub fn connect(port: u16, db: u32) -> Redis {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut r = Redis(BufReader::new(s));
        assert_eq!(r.cmd(&["SELECT", &db.to_string()]), R::Str(b"OK".to_vec()));
        r
    }

    pub fn cmd(&mut self, args: &[&str]) -> R {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        self.0.get_mut().write_all(&out).unwrap();
        self.read()
    }

    pub fn read(&mut self) -> R {
        let mut line = String::new();
        self.0.read_line(&mut line).unwrap();
        let line = line.trim_end();
        let (k, rest) = line.split_at(1);
        match k {
            "+" => R::Str(rest.as_bytes().to_vec()),
            "-" => R::Err(rest.to_string()),
            ":" => R::Int(rest.parse().unwrap()),
            "$" => {
                let n: i64 = rest.parse().unwrap();
                if n < 0 {
                    return R::Nil;
                }
                let mut b = vec![0; n as usize + 2];
                self.0.read_exact(&mut b).unwrap();
                b.truncate(n as usize);
                R::Str(b)
            }
            "*" => {
                let n: i64 = rest.parse().unwrap();
                R::Arr((0..n.max(0)).map(|_| self.read()).collect())
            }
            _ => panic!("bad reply {line:?}"),
        }
    }

    /// Every key matching `pattern`, sorted.
    pub fn keys(&mut self, pattern: &str) -> Vec<String> {
        let mut k: Vec<String> = self
            .cmd(&["KEYS", pattern])
            .items()
            .iter()
            .map(R::text)
            .collect();
        k.sort();
        k
    }

    /// Every key and its value (a string as text, a hash as `{field: text}`, other types
    /// by name): the whole database, for before/after comparisons.
    pub fn dump(&mut self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        for k in self.keys("*") {
            let ty = self.cmd(&["TYPE", &k]).text();
            let v = match ty.as_str() {
                "string" => self.cmd(&["GET", &k]).text(),
                "hash" => {
                    let mut f: Vec<String> = self
                        .cmd(&["HGETALL", &k])
                        .items()
                        .chunks(2)
                        .map(|p| format!("{}={}", p[0].text(), p[1].text()))
                        .collect();
                    f.sort();
                    f.join("&")
                }
                other => other.to_string(),
            };
            m.insert(k, v);
        }
        m
    }

    /// [`Redis::dump`] without the sink's refused hash (`<prefix>:__cdc:refused`, its
    /// bookkeeping of dead letters not yet known durable), for comparing views.
    pub fn dump_views(&mut self) -> BTreeMap<String, String> {
        let mut d = self.dump();
        d.retain(|k, _| !k.ends_with(":__cdc:refused"));
        d
    }

    /// A JSON view: the keys matching `pattern` (`<prefix>:<table>:<id>`) as id → the row
    /// they hold; a key of another type (another application's) as the string
    /// `"<not a string>"`.
    pub fn json_view(&mut self, pattern: &str) -> BTreeMap<i64, serde_json::Value> {
        let mut m = BTreeMap::new();
        for k in self.keys(pattern) {
            let id: i64 = k.rsplit(':').next().unwrap().parse().unwrap();
            match self.cmd(&["GET", &k]) {
                R::Str(b) => {
                    m.insert(id, serde_json::from_slice(&b).unwrap());
                }
                R::Err(_) => {
                    m.insert(id, serde_json::Value::String("<not a string>".into()));
                }
                // Deleted by the sink between KEYS and GET.
                R::Nil => {}
                other => panic!("{k}: {other:?}"),
            }
        }
        m
    }
}
