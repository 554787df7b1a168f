//! Fuzz target `binlog`: the MySQL / MariaDB source's binlog decoding
//! (`sources/src/mysql`), the way the stream (`mysql/stream.rs`) handles each event.
//!
//! The input is a binlog event stream as the server sends it (what follows the 4-byte
//! magic of a binlog file): events with the v4 19-byte header (timestamp u32, type u8,
//! server_id u32, event_size u32, log_pos u32, flags u16, little-endian) and their
//! bodies, read by `mysql_common`'s `EventStreamReader` (format description, table maps,
//! rotations), as `mysql_async`'s binlog stream does. An event whose size does not fit
//! the rest of the input ends it (the connection's framing guarantees whole events).
//!
//! - MariaDB's own events: GTID (162) → `parse_gtid_event`, GTID_LIST (163) →
//!   `parse_gtid_list`, BINLOG_CHECKPOINT (161) → `parse_binlog_checkpoint`,
//!   ANNOTATE_ROWS (160) → `parse_annotate_rows`;
//! - QUERY: the statement through the DDL follower (`Schemas::apply_ddl`, MariaDB or
//!   MySQL 8 spelling by the header's flags), which defines the tables row events decode
//!   with;
//! - the events the stream refuses unparsed (MariaDB's compressed and encryption events,
//!   MySQL's compressed transactions) are skipped;
//! - TABLE_MAP: its optional metadata (column names, as the stream cross-checks);
//! - rows events (v1, v2, partial): `for_each_row` with the event's table map, every value
//!   decoded by the table's `ColumnDecoder`s (binlog form: charsets, binary JSON, decimals,
//!   temporal types, ENUM / SET; and the snapshot's text form of the same bytes).
//!
//! Seeds: events crafted from the MariaDB / MySQL binlog event formats (`fuzz/seeds.sh`).
#![no_main]

use cdc_sources::filter::TableFilter;
use cdc_sources::mysql::binlog::{
    check_rows_event, for_each_row, is_rows_event, parse_annotate_rows, parse_binlog_checkpoint, parse_gtid_event, parse_gtid_list,
    ANNOTATE_ROWS_EVENT, BINLOG_CHECKPOINT_EVENT, FIRST_COMPRESSED_EVENT, GTID_LIST_EVENT,
    LAST_COMPRESSED_EVENT, MARIADB_GTID_EVENT, START_ENCRYPTION_EVENT, TRANSACTION_PAYLOAD_EVENT,
};
use cdc_sources::mysql::decode::{ColumnDecoder, DecodeOptions, ZeroDateMode};
use cdc_sources::mysql::schema::{Flavor, Schemas};
use libfuzzer_sys::fuzz_target;
use mysql_common::binlog::consts::BinlogVersion;
use mysql_common::binlog::events::{EventData, OptionalMetadataField};
use mysql_common::binlog::value::BinlogValue;
use mysql_common::binlog::EventStreamReader;

const HEADER_LEN: usize = 19;

/// `CDC_FUZZ_DEBUG=1`: say what each event decoded to (to check seeds by hand).
fn debug() -> bool {
    static D: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *D.get_or_init(|| std::env::var_os("CDC_FUZZ_DEBUG").is_some())
}

fn decode_image(
    decoders: &[ColumnDecoder],
    image: Option<&[Option<BinlogValue<'_>>]>,
    opts: &DecodeOptions,
) {
    for (v, d) in image.unwrap_or(&[]).iter().zip(decoders) {
        let Some(v) = v else { continue };
        let _ = d.binlog(v, opts);
        if let BinlogValue::Value(mysql_common::Value::Bytes(b)) = v {
            let _ = d.text(Some(b), opts);
        }
        let _ = d.binlog_owned(v.clone().into_owned(), opts);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut reader = EventStreamReader::new(BinlogVersion::Version4);
    let filter = TableFilter::default();
    let mut maria = Schemas::new(Flavor::MariaDb);
    let mut mysql = Schemas::new(Flavor::MySql8);
    let mut rest = data;
    while rest.len() >= HEADER_LEN {
        let size = u32::from_le_bytes(rest[9..13].try_into().unwrap()) as usize;
        if !(HEADER_LEN..=rest.len()).contains(&size) {
            break;
        }
        let (one, next) = rest.split_at(size);
        rest = next;
        let ev = match reader.read(one) {
            Ok(Some(ev)) => ev,
            other => {
                if debug() {
                    eprintln!("event not read: {:?}", other.err());
                }
                continue;
            }
        };
        let h = ev.header();
        let opts = DecodeOptions {
            zero_date: if h.flags_raw() & 1 != 0 {
                ZeroDateMode::Raw
            } else {
                ZeroDateMode::Null
            },
        };
        let schemas = if h.flags_raw() & 2 != 0 {
            &mut mysql
        } else {
            &mut maria
        };
        match h.event_type_raw() {
            MARIADB_GTID_EVENT => {
                if let Ok(g) = parse_gtid_event(ev.data(), h.server_id()) {
                    let _ = (g.standalone(), g.gtid.to_string());
                }
            }
            GTID_LIST_EVENT => {
                let _ = parse_gtid_list(ev.data());
            }
            BINLOG_CHECKPOINT_EVENT => {
                let _ = parse_binlog_checkpoint(ev.data());
            }
            ANNOTATE_ROWS_EVENT => {
                let _ = parse_annotate_rows(ev.data());
            }
            // The stream stops on these without parsing them (as `mysql/stream.rs`).
            FIRST_COMPRESSED_EVENT..=LAST_COMPRESSED_EVENT
            | START_ENCRYPTION_EVENT
            | TRANSACTION_PAYLOAD_EVENT => {}
            // The stream refuses these before parsing them (as `mysql/stream.rs`).
            ty if is_rows_event(ty) && check_rows_event(ty, ev.data()).is_err() => {}
            ty => match ev.read_data() {
                Ok(Some(EventData::QueryEvent(q))) => {
                    let db = q.schema();
                    let db = (!db.is_empty()).then_some(db.as_ref());
                    let r = schemas.apply_ddl(db, q.query().trim(), &filter);
                    if debug() {
                        eprintln!("query {:?}: {:?}", q.query(), r.map(|e| e.changes.len()));
                    }
                }
                Ok(Some(EventData::TableMapEvent(t))) => {
                    for field in t.iter_optional_meta() {
                        if let Ok(OptionalMetadataField::ColumnName(n)) = field {
                            for name in n.iter_names() {
                                let _ = name.map(|c| c.name().into_owned());
                            }
                        }
                    }
                }
                Ok(Some(EventData::RowsEvent(r))) => {
                    let Some(tme) = reader.get_tme(r.table_id()) else {
                        continue;
                    };
                    let table = schemas.get(&tme.database_name(), &tme.table_name());
                    let decoders: Vec<ColumnDecoder> = table
                        .map(|t| t.columns.iter().map(ColumnDecoder::new).collect())
                        .unwrap_or_default();
                    let unsigned: Vec<bool> = table
                        .map(|t| t.columns.iter().map(|c| c.unsigned()).collect())
                        .unwrap_or_default();
                    let (mut before, mut after) = (Vec::new(), Vec::new());
                    let res =
                        for_each_row(&r, tme, &unsigned, &mut before, &mut after, |_, b, a| {
                            decode_image(&decoders, b, &opts);
                            decode_image(&decoders, a, &opts);
                            if debug() {
                                for (c, v) in decoders.iter().zip(a.or(b).unwrap_or(&[])) {
                                    eprintln!(
                                        "  {:?} -> {:?}",
                                        v,
                                        v.as_ref().map(|v| c.binlog(v, &opts))
                                    );
                                }
                            }
                            Ok(())
                        });
                    if debug() {
                        eprintln!(
                            "rows of {} columns ({} decoders): {:?}",
                            r.num_columns(),
                            decoders.len(),
                            res.err().map(|e| e.to_string())
                        );
                    }
                }
                other => {
                    if debug() {
                        eprintln!("event {ty}: {:?}", other.map(|d| d.is_some()));
                    }
                }
            },
        }
    }
});
