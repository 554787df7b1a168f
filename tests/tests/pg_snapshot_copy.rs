//! The snapshot reads tables whose columns are all simple built-in types with
//! `COPY … (FORMAT binary)` and the rest in text format: for the same rows both decoders
//! must give the same values, edge cases included (infinities, BC dates, NaN, numerics
//! beyond i128, escapes, time zones), and rows split across messages at any byte.

use std::sync::Arc;

use cdc_harness::PgServer;
use cdc_schemas::{Row, TableId};
use cdc_sources::postgres::decode::copy::{binary_plan, CopyDecoder};
use cdc_sources::postgres::relation::{RelationCache, RelationInfo, StaticTypeResolver};
use cdc_sources::postgres::snapshot::{describe_table, SESSION_SETTINGS};
use futures_util::StreamExt;

const TABLE: &str = "
CREATE TABLE t (
  id int8 PRIMARY KEY, b bool, i2 int2, i4 int4, f4 float4, f8 float8, n numeric,
  n2 numeric(12,2), tx text, vc varchar(10), bc char(4), nm name, by bytea, d date,
  tm time, ttz timetz, ts timestamp, tstz timestamptz, iv interval, u uuid, j json,
  jb jsonb, bt bit(5), vb varbit);
INSERT INTO t VALUES
 (1, true, 1, 2, 1.5, 2.25, 12.340, 3.10, 'plain', 'v', 'ab', 'nm', '\\x00ff', '2024-02-29',
  '12:34:56.789', '12:00:00+02', '2024-01-01 00:00:01', '2024-01-01 00:00:01+00',
  '1 year 2 mons 3 days 04:05:06.789', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
  '{\"a\": [1, 2]}', '{\"b\": {\"c\": null}}', B'10101', B'1'),
 (2, false, -32768, 2147483647, 'NaN', '-Infinity', 'NaN', -0.00,
  E'tab\\there\\nnew \\\\ back é 😀', '', 'x', '', '\\x', 'infinity', '24:00:00',
  '23:59:59.999999-12:30', '-infinity', '4713-01-01 00:00:00+00 BC',
  '-1 year -2 days -00:00:01.5', '00000000-0000-0000-0000-000000000000', 'null', '[]',
  B'00000', B''),
 (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (4, true, 32767, -2147483648, 3.4e38, 1e-300,
  '123456789012345678901234567890.123456789012345678901234567890', 0.01, 'x', 'y', 'abcd',
  'n', '\\xdeadbeef', '4713-01-01 BC', '00:00:00', '00:00:00+14', '200000-12-31 23:59:59.999999',
  'infinity', '178000000 years', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '\"s\"', '1.50',
  B'11111', B'1010101010'),
 (5, false, 0, 0, '-0', '-0', 'Infinity', -9999999999.99, 'z', 'z', 'z', 'z', '\\x01',
  '1970-01-01', '00:00:00.000001', '00:00:00-00:00:01', '1970-01-01 00:00:00',
  '1999-12-31 23:59:59.999999-08', '-178000000 years', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
  '{}', '{\"k\": \"v\\u00e9\"}', B'00001', B'0'),
 (6, true, 7, 7, 7, 7, '-0.000100', 0, 'z', 'z', 'z', 'z', '\\x02', '2000-01-01',
  '23:59:59', '12:00:00+05:30', '2000-01-01 00:00:00', '2000-01-01 00:00:00+00', '0',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '1', '2', B'00010', B'1'),
 (7, true, 7, 7, 7, 7, 1e50, 0, 'z', 'z', 'z', 'z', '\\x03', '2000-01-01', '01:00', '01:00+00',
  '1900-01-01', '1900-01-01 00:00:00+00', '1 mon', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
  '1', '2', B'00011', B'11'),
 (8, true, 7, 7, 7, 7, '-0.000000000000000000000000000000000000000001', 99.9, 'z', 'z', 'z',
  'z', '\\x04', '2000-01-01', '01:00', '01:00+00', '1900-01-01', '1900-01-01 00:00:00+00',
  '1 mon', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '1', '2', B'00011', B'11'),
 (9, true, 7, 7, 7, 7, 10000, 100, 'z', 'z', 'z', 'z', '\\x05', '2000-01-01', '01:00',
  '01:00+00', '1900-01-01', '1900-01-01 00:00:00+00', '1 mon',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '1', '2', B'00011', B'11');
";

/// The raw CopyData messages of `sql`.
async fn copy_messages(c: &tokio_postgres::Client, sql: &str) -> Vec<Vec<u8>> {
    let s = c.copy_out(sql).await.unwrap();
    futures_util::pin_mut!(s);
    let mut out = Vec::new();
    while let Some(m) = s.next().await {
        out.push(m.unwrap().to_vec());
    }
    out
}

/// Decodes `chunks` with `dec`; rows rendered with `Debug` (so NaN equals NaN).
fn decode(rel: &RelationInfo, mut dec: CopyDecoder, chunks: &[&[u8]]) -> Vec<String> {
    let mut rows: Vec<Row> = Vec::new();
    for c in chunks {
        dec.feed(rel, c, &mut |r| {
            rows.push(r);
            Ok(())
        })
        .unwrap();
    }
    dec.finish(rel, &mut |r| {
        rows.push(r);
        Ok(())
    })
    .unwrap();
    rows.iter().map(|r| format!("{r:?}")).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn binary_and_text_copy_decode_to_the_same_values() {
    let pg = PgServer::shared();
    let db = pg.create_database().await.unwrap();
    pg.execute(&db, TABLE).await.unwrap();
    let c = pg.superuser_client(&db).await.unwrap();
    c.batch_execute(SESSION_SETTINGS).await.unwrap();
    let resolver = Arc::new(StaticTypeResolver::new());
    let mut cache = RelationCache::with_resolver(resolver.clone());
    let rel = describe_table(&c, &mut cache, &resolver, &TableId::new("public", "t"))
        .await
        .unwrap();
    let plan = binary_plan(&rel).expect("every column of t has a binary decoder");
    let select = "COPY (SELECT * FROM t ORDER BY id) TO STDOUT";
    let text = copy_messages(&c, select).await;
    let binary = copy_messages(&c, &format!("{select} (FORMAT binary)")).await;
    let text_chunks: Vec<&[u8]> = text.iter().map(|m| m.as_slice()).collect();
    let bin_chunks: Vec<&[u8]> = binary.iter().map(|m| m.as_slice()).collect();
    let from_text = decode(&rel, CopyDecoder::text(), &text_chunks);
    let from_binary = decode(&rel, CopyDecoder::binary(plan.clone()), &bin_chunks);
    assert_eq!(from_text.len(), 9);
    for (t, b) in from_text.iter().zip(&from_binary) {
        assert_eq!(t, b);
    }
    assert_eq!(from_text, from_binary);
    // The same bytes in pieces of every size from 1 to 37 bytes.
    let all_bin: Vec<u8> = binary.concat();
    let all_text: Vec<u8> = text.concat();
    for size in 1..38 {
        let pieces: Vec<&[u8]> = all_bin.chunks(size).collect();
        assert_eq!(
            decode(&rel, CopyDecoder::binary(plan.clone()), &pieces),
            from_text,
            "binary in {size}-byte pieces"
        );
        let pieces: Vec<&[u8]> = all_text.chunks(size).collect();
        assert_eq!(
            decode(&rel, CopyDecoder::text(), &pieces),
            from_text,
            "text in {size}-byte pieces"
        );
    }
    // Types without a binary decoder keep the table in text format.
    pg.execute(&db, "CREATE TABLE u (id int PRIMARY KEY, a inet, b int[])")
        .await
        .unwrap();
    let rel = describe_table(&c, &mut cache, &resolver, &TableId::new("public", "u"))
        .await
        .unwrap();
    assert!(binary_plan(&rel).is_none());
}
