//! Fuzz target `pgoutput`: the Postgres source's decoders (`sources/src/postgres`).
//!
//! The input is a sequence of chunks, each `kind u8, length u16 (big-endian), bytes`:
//!
//! - kind 0: one pgoutput message (an XLogData payload) through
//!   `PgOutputDecoder::decode_next` (streaming state: Stream Start / Stop); a Relation
//!   or Type message goes into a `RelationCache` (with catalog types: an enum, a domain,
//!   a composite and arrays of them), an Insert / Update / Delete has its tuples decoded
//!   into rows by the cache (the text parsers of every column type);
//! - kind 1: the same message through `PgOutputDecoder::decode` with the opposite
//!   streaming state;
//! - kind 2 / 3: `COPY … TO STDOUT` data of the last relation, text / binary format
//!   (`CopyDecoder`, when the relation has a binary plan), finished at the input's end;
//! - kind 4: one text value: byte 0 picks a type of the type table (bits 0-6, modulo its
//!   length; bit 7: the type's array),
//!   byte 1 the typmod, the rest is parsed (`parse_value`);
//! - kind 5: one binary value: byte 0 picks the binary decoder, the rest is decoded
//!   (`decode_binary`).
//!
//! Seeds: messages encoded by hand following the protocol's message formats
//! (`fuzz/seeds.sh`).
#![no_main]

use std::sync::Arc;

use bytes::Bytes;
use cdc_sources::postgres::decode::copy::{binary_plan, CopyDecoder};
use cdc_sources::postgres::decode::{
    decode_binary, map_type, parse_value, BinKind, PgTypeInfo, PgTypeKind, BUILTIN_TYPES,
};
use cdc_sources::postgres::pgoutput::{OldTuple, PgOutputDecoder, PgOutputMessage};
use cdc_sources::postgres::relation::{RelationInfo, StaticTypeResolver};
use cdc_sources::postgres::RelationCache;
use libfuzzer_sys::fuzz_target;

const BIN_KINDS: [BinKind; 19] = [
    BinKind::Bool,
    BinKind::Int2,
    BinKind::Int4,
    BinKind::Int8,
    BinKind::Float4,
    BinKind::Float8,
    BinKind::Numeric,
    BinKind::Text,
    BinKind::Bytea,
    BinKind::Date,
    BinKind::Time,
    BinKind::TimeTz,
    BinKind::Timestamp,
    BinKind::TimestampTz,
    BinKind::Interval,
    BinKind::Uuid,
    BinKind::Json,
    BinKind::Jsonb,
    BinKind::Bits,
];

/// Catalog types a Relation may name besides the built-in ones (OIDs 90000..=90005).
fn resolver() -> Arc<StaticTypeResolver> {
    let r = StaticTypeResolver::new();
    let t = |oid, name: &str, kind| PgTypeInfo {
        oid,
        namespace: "public".into(),
        name: name.into(),
        kind,
    };
    r.insert(t(
        90000,
        "mood",
        PgTypeKind::Enum {
            labels: vec!["sad".into(), "ok".into()],
        },
    ));
    r.insert(t(
        90001,
        "price",
        PgTypeKind::Domain {
            base_oid: 1700,
            base_typmod: (10 << 16) + 2 + 4,
        },
    ));
    r.insert(t(
        90002,
        "pair",
        PgTypeKind::Composite {
            attributes: vec![
                ("a".into(), 23, -1),
                ("b".into(), 25, -1),
                ("c".into(), 1007, -1),
                ("m".into(), 90000, -1),
            ],
        },
    ));
    r.insert(t(
        90003,
        "_pair",
        PgTypeKind::Array {
            element_oid: 90002,
            delimiter: b',',
        },
    ));
    r.insert(t(
        90004,
        "_mood",
        PgTypeKind::Array {
            element_oid: 90000,
            delimiter: b',',
        },
    ));
    // A domain over itself: the mapping must stop.
    r.insert(t(
        90005,
        "loop",
        PgTypeKind::Domain {
            base_oid: 90005,
            base_typmod: -1,
        },
    ));
    Arc::new(r)
}

/// `CDC_FUZZ_DEBUG=1`: say what each chunk decoded to (to check seeds by hand).
fn debug() -> bool {
    static D: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *D.get_or_init(|| std::env::var_os("CDC_FUZZ_DEBUG").is_some())
}

fn show<T: std::fmt::Debug, E: std::fmt::Display>(what: &str, r: &Result<T, E>) {
    if debug() {
        match r {
            Ok(v) => eprintln!("{what}: {:.300}", format!("{v:?}")),
            Err(e) => eprintln!("{what}: ERROR {e}"),
        }
    }
}

struct State {
    decoder: PgOutputDecoder,
    cache: RelationCache,
    last: Option<Arc<RelationInfo>>,
    copy: Option<CopyDecoder>,
}

impl State {
    fn message(&mut self, m: &PgOutputMessage) {
        match m {
            PgOutputMessage::Relation(r) => {
                let _ = self.cache.unresolved_types(r);
                self.last = Some(self.cache.apply_relation(r));
                self.copy = None;
            }
            PgOutputMessage::Type(t) => self.cache.apply_type(t),
            PgOutputMessage::Insert(i) => {
                show("insert", &self.cache.decode_tuple(i.relation_id, &i.new));
            }
            PgOutputMessage::Update(u) => {
                if let Some(old) = &u.old {
                    show(
                        "update old",
                        &self.cache.decode_tuple(u.relation_id, old.tuple()),
                    );
                }
                show("update", &self.cache.decode_tuple(u.relation_id, &u.new));
            }
            PgOutputMessage::Delete(d) => {
                let t = match &d.old {
                    OldTuple::Key(t) | OldTuple::Full(t) => t,
                };
                show("delete", &self.cache.decode_tuple(d.relation_id, t));
            }
            other => {
                let _ = other.to_string();
            }
        }
    }

    fn copy(&mut self, binary: bool, data: &[u8]) {
        let Some(rel) = self.last.clone() else {
            return;
        };
        if self.copy.as_ref().is_none_or(|c| c.is_binary() != binary) {
            self.copy = if binary {
                binary_plan(&rel).map(CopyDecoder::binary)
            } else {
                Some(CopyDecoder::text())
            };
        }
        if let Some(c) = &mut self.copy {
            let r = c.feed(&rel, data, &mut |row| {
                show("copy row", &Ok::<_, String>(row));
                Ok(())
            });
            show("copy", &r);
            if r.is_err() {
                self.copy = None;
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut s = State {
        decoder: PgOutputDecoder::new(),
        cache: RelationCache::with_resolver(resolver()),
        last: None,
        copy: None,
    };
    let mut rest = data;
    while rest.len() >= 3 {
        let kind = rest[0];
        let n = u16::from_be_bytes([rest[1], rest[2]]) as usize;
        let body = &rest[3..3 + n.min(rest.len() - 3)];
        rest = &rest[3 + body.len()..];
        match kind {
            0 => {
                let r = s.decoder.decode_next(&Bytes::copy_from_slice(body));
                show("message", &r);
                if let Ok(m) = r {
                    s.message(&m);
                }
            }
            1 => {
                let in_stream = !s.decoder.in_stream();
                if let Ok(m) = PgOutputDecoder::decode(&Bytes::copy_from_slice(body), in_stream) {
                    s.message(&m);
                }
            }
            2 | 3 => s.copy(kind == 3, body),
            4 if body.len() >= 2 => {
                let t = &BUILTIN_TYPES[(body[0] & 0x7f) as usize % BUILTIN_TYPES.len()];
                let oid = if body[0] & 0x80 != 0 {
                    t.array_oid
                } else {
                    t.oid
                };
                let typmod = body[1] as i32 - 1;
                let m = map_type(oid, typmod, &|_| None);
                show("value", &parse_value(&m.kind, &body[2..]));
            }
            5 if !body.is_empty() => {
                let k = BIN_KINDS[body[0] as usize % BIN_KINDS.len()];
                show("binary value", &decode_binary(k, &body[1..]));
            }
            _ => {}
        }
    }
    if let (Some(rel), Some(c)) = (s.last.clone(), s.copy.as_mut()) {
        let _ = c.finish(&rel, &mut |_| Ok(()));
    }
});
