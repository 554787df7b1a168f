//! The transaction metadata topic in the Debezium golden tests (`pg_golden.rs`,
//! `my_golden.rs`): what both sources' tests check of our `<prefix>.transaction` records
//! beyond the record-by-record comparison with Debezium's, and the rules for the
//! differences both sources share.
//!
//! [`check_consistent`] checks ours against our own change records, which no comparison
//! with Debezium can (its ids change within a transaction on Postgres): BEGIN and END
//! alternate with one id, that id is the `transaction.id` of the change records they
//! bracket, END counts exactly those records (tombstones aside) per data collection, and
//! every change record with a `transaction` block has its END. It also serves the
//! end-to-end test `pg_transaction_topic.rs` (records with or without schemas).
#![allow(dead_code)]

use std::collections::BTreeMap;

use cdc_harness::golden::{Comparison, Pair, Record};
use serde_json::Value as Json;

/// A record value's payload: under `payload` with schemas, the value itself without.
pub fn payload(v: &Json) -> &Json {
    v.get("payload").unwrap_or(v)
}

/// The value payload of a transaction record (`status` BEGIN / END), else `None`.
pub fn tx_payload(r: &Record) -> Option<&Json> {
    let p = payload(r.value.as_ref()?);
    p["status"].is_string().then_some(p)
}

/// Both sides' payloads when the pair is a pair of transaction records.
pub fn tx_pair<'a>(p: &'a mut Pair) -> Option<(&'a Json, &'a mut Json)> {
    tx_payload(p.want)?;
    tx_payload(p.got)?;
    let w = &p.want.value.as_ref()?["payload"];
    let g = &mut p.got.value.as_mut()?["payload"];
    Some((w, g))
}

/// Sets the id of our transaction record (key and value) to `id`.
pub fn set_id(r: &mut Record, id: &str) {
    for part in [r.value.as_mut(), r.key.as_mut()].into_iter().flatten() {
        match part.get_mut("payload") {
            Some(p) => p["id"] = Json::from(id),
            None => part["id"] = Json::from(id),
        }
    }
}

/// `data_collections` as name → count.
fn counts(dcs: &Json) -> BTreeMap<String, u64> {
    dcs.as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            (
                d["data_collection"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                d["event_count"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// The rule for the order of `data_collections`: Debezium's is the iteration order of a
/// Java `HashMap`; ours the order of each table's first change in the transaction. Same
/// names and counts required.
pub fn data_collections_order(p: &mut Pair) -> bool {
    let Some((w, g)) = tx_pair(p) else {
        return false;
    };
    let (wd, gd) = (&w["data_collections"], &g["data_collections"]);
    if wd != gd && wd.is_array() && counts(wd) == counts(gd) {
        g["data_collections"] = wd.clone();
        return true;
    }
    false
}

/// Checks our transaction topic (`tx_topic` of `got`) against our change records (every
/// other topic); `collection` names a change record's data collection from its value
/// payload. Differences go to `cmp` under `[capture]`.
pub fn check_consistent(
    capture: &str,
    got: &BTreeMap<String, Vec<Record>>,
    tx_topic: &str,
    collection: impl Fn(&str, &Json) -> String,
    cmp: &mut Comparison,
) {
    // id → data collection → change records.
    let mut changes: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for (topic, recs) in got.iter().filter(|(t, _)| *t != tx_topic) {
        for r in recs {
            let Some(v) = &r.value else { continue };
            let p = payload(v);
            let Some(id) = p["transaction"]["id"].as_str() else {
                continue;
            };
            *changes
                .entry(id.to_string())
                .or_default()
                .entry(collection(topic, p))
                .or_default() += 1;
        }
    }
    let mut fail = |what: String| cmp.fail(format!("[{capture}] {tx_topic} (ours): {what}"));
    let recs = got.get(tx_topic).map(Vec::as_slice).unwrap_or_default();
    let mut open: Option<String> = None;
    let mut ended = 0;
    for (i, r) in recs.iter().enumerate() {
        let Some(p) = tx_payload(r) else {
            fail(format!(
                "record {i} is not a transaction record: {:?}",
                r.value
            ));
            continue;
        };
        let id = p["id"].as_str().unwrap_or_default().to_string();
        let key_id = r
            .key
            .as_ref()
            .map(|k| k.get("payload").unwrap_or(k)["id"].clone());
        if key_id != Some(Json::from(id.as_str())) {
            fail(format!("record {i}: key {:?} is not {{id: {id}}}", r.key));
        }
        match (p["status"].as_str(), open.take()) {
            (Some("BEGIN"), None) => open = Some(id),
            (Some("END"), Some(b)) if b == id => {
                ended += 1;
                let want = changes.get(&id).cloned().unwrap_or_default();
                let end = counts(&p["data_collections"]);
                if end != want {
                    fail(format!(
                        "END {id} counts {end:?}, its change records {want:?}"
                    ));
                }
                if p["event_count"].as_u64() != Some(want.values().sum()) {
                    fail(format!(
                        "END {id}: event_count {} for {want:?}",
                        p["event_count"]
                    ));
                }
            }
            (s, o) => fail(format!("record {i}: {s:?} {id} after BEGIN {o:?}")),
        }
    }
    if open.is_some() {
        fail(format!("BEGIN {open:?} has no END"));
    }
    if ended != changes.len() {
        fail(format!(
            "{} transactions of change records, {ended} END records",
            changes.len()
        ));
    }
}
