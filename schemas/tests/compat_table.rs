//! The compatibility table: schema pair × level × expected verdict (and, for rejections,
//! a fragment of the message that must say why).

use apache_avro::Schema;
use cdc_schemas::compat::{can_read, check_compatibility, CompatibilityLevel, Direction};

use CompatibilityLevel::*;

fn rec(name: &str, fields: &str) -> String {
    format!(r#"{{"type":"record","name":"{name}","namespace":"t","fields":[{fields}]}}"#)
}

fn r(fields: &str) -> String {
    rec("R", fields)
}

fn parse(s: &str) -> Schema {
    Schema::parse_str(s).unwrap_or_else(|e| panic!("bad test schema {s}: {e}"))
}

/// (case, old, new, [(level, compatible, message fragment when not)])
type Case = (
    &'static str,
    String,
    String,
    Vec<(CompatibilityLevel, bool, &'static str)>,
);

fn cases() -> Vec<Case> {
    let node = |extra: &str| {
        rec(
            "Node",
            &format!(
                r#"{{"name":"value","type":"int"}},{{"name":"next","type":["null","Node"],"default":null}}{extra}"#
            ),
        )
    };
    vec![
        (
            "field added without a default",
            r(r#"{"name":"a","type":"int"}"#),
            r(r#"{"name":"a","type":"int"},{"name":"price","type":"int"}"#),
            vec![
                (
                    Backward,
                    false,
                    "field `price` added without a default: old data cannot be read",
                ),
                (Forward, true, ""),
                (Full, false, "price"),
                (None, true, ""),
            ],
        ),
        (
            "field added with a default",
            r(r#"{"name":"a","type":"int"}"#),
            r(r#"{"name":"a","type":"int"},{"name":"b","type":"int","default":0}"#),
            vec![(Backward, true, ""), (Forward, true, ""), (Full, true, "")],
        ),
        (
            "field removed that had a default",
            r(r#"{"name":"a","type":"int"},{"name":"b","type":"int","default":0}"#),
            r(r#"{"name":"a","type":"int"}"#),
            vec![
                (Backward, true, ""),
                (Forward, true, ""),
                (FullTransitive, true, ""),
            ],
        ),
        (
            "field removed that had no default",
            r(r#"{"name":"a","type":"int"},{"name":"b","type":"int"}"#),
            r(r#"{"name":"a","type":"int"}"#),
            vec![
                (Backward, true, ""),
                (
                    Forward,
                    false,
                    "field `b` removed but it has no default in the old schema",
                ),
                (Full, false, "`b`"),
            ],
        ),
        (
            "int to long",
            r(r#"{"name":"a","type":"int"}"#),
            r(r#"{"name":"a","type":"long"}"#),
            vec![
                (Backward, true, ""),
                (Forward, false, "cannot promote"),
                (Full, false, ""),
            ],
        ),
        (
            "long to int",
            r(r#"{"name":"a","type":"long"}"#),
            r(r#"{"name":"a","type":"int"}"#),
            vec![
                (Backward, false, "from `long` (writer) to `int` (reader)"),
                (Forward, true, ""),
            ],
        ),
        (
            "int to float, long to double",
            r(r#"{"name":"a","type":"int"},{"name":"b","type":"long"}"#),
            r(r#"{"name":"a","type":"float"},{"name":"b","type":"double"}"#),
            vec![(Backward, true, ""), (Forward, false, "")],
        ),
        (
            "float to double",
            r(r#"{"name":"a","type":"float"}"#),
            r(r#"{"name":"a","type":"double"}"#),
            vec![(Backward, true, ""), (Forward, false, "")],
        ),
        (
            "double to float",
            r(r#"{"name":"a","type":"double"}"#),
            r(r#"{"name":"a","type":"float"}"#),
            vec![(Backward, false, "cannot promote"), (Forward, true, "")],
        ),
        (
            "float to int",
            r(r#"{"name":"a","type":"float"}"#),
            r(r#"{"name":"a","type":"int"}"#),
            vec![(Backward, false, ""), (Forward, true, "")],
        ),
        (
            "string to bytes",
            r(r#"{"name":"a","type":"string"}"#),
            r(r#"{"name":"a","type":"bytes"}"#),
            vec![(Backward, true, ""), (Forward, true, ""), (Full, true, "")],
        ),
        (
            "string to int",
            r(r#"{"name":"a","type":"string"}"#),
            r(r#"{"name":"a","type":"int"}"#),
            vec![(Backward, false, ""), (Forward, false, "")],
        ),
        (
            "enum symbol added, no enum default",
            r(r#"{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}}"#),
            r(r#"{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B","C"]}}"#),
            vec![
                (Backward, true, ""),
                (
                    Forward,
                    false,
                    "enum symbol `C` was added and the old enum has no default",
                ),
            ],
        ),
        (
            "enum symbol added, old enum has a default",
            r(
                r#"{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"],"default":"A"}}"#,
            ),
            r(
                r#"{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B","C"],"default":"A"}}"#,
            ),
            vec![(Backward, true, ""), (Forward, true, ""), (Full, true, "")],
        ),
        (
            "enum symbol removed, no default",
            r(r#"{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B","C"]}}"#),
            r(r#"{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}}"#),
            vec![
                (
                    Backward,
                    false,
                    "enum symbol `C` was removed and the enum has no default",
                ),
                (Forward, true, ""),
            ],
        ),
        (
            "enum symbol removed, new enum has a default",
            r(r#"{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B","C"]}}"#),
            r(
                r#"{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"],"default":"A"}}"#,
            ),
            vec![(Backward, true, ""), (Forward, true, "")],
        ),
        (
            "union widened",
            r(r#"{"name":"u","type":["null","string"]}"#),
            r(r#"{"name":"u","type":["null","string","int"]}"#),
            vec![
                (Backward, true, ""),
                (Forward, false, "union branch `int` was added"),
            ],
        ),
        (
            "union narrowed",
            r(r#"{"name":"u","type":["null","string","int"]}"#),
            r(r#"{"name":"u","type":["null","string"]}"#),
            vec![
                (Backward, false, "union branch `int` was removed"),
                (Forward, true, ""),
            ],
        ),
        (
            "non-union writer, union reader (became nullable)",
            r(r#"{"name":"u","type":"string"}"#),
            r(r#"{"name":"u","type":["null","string"],"default":null}"#),
            vec![
                (Backward, true, ""),
                (Forward, false, "the field became nullable"),
            ],
        ),
        (
            "union writer, non-union reader (became required)",
            r(r#"{"name":"u","type":["null","string"],"default":null}"#),
            r(r#"{"name":"u","type":"string"}"#),
            vec![
                (Backward, false, "the field became non-nullable"),
                (Forward, true, ""),
            ],
        ),
        (
            "union reader picks a promotion",
            r(r#"{"name":"u","type":"int"}"#),
            r(r#"{"name":"u","type":["null","long"],"default":null}"#),
            vec![(Backward, true, ""), (Forward, false, "")],
        ),
        (
            "decimal precision change",
            r(
                r#"{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}}"#,
            ),
            r(
                r#"{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}}"#,
            ),
            vec![
                (Backward, true, ""),
                (Forward, true, ""),
                (FullTransitive, true, ""),
            ],
        ),
        (
            "decimal scale change",
            r(
                r#"{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}}"#,
            ),
            r(
                r#"{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":3}}"#,
            ),
            vec![
                (Backward, false, "decimal scale changed from 2 to 3"),
                (Forward, false, "decimal scale changed from 3 to 2"),
            ],
        ),
        (
            "fixed size change",
            r(r#"{"name":"f","type":{"type":"fixed","name":"F","size":4}}"#),
            r(r#"{"name":"f","type":{"type":"fixed","name":"F","size":8}}"#),
            vec![
                (Backward, false, "fixed size changed from 4 to 8 bytes"),
                (Forward, false, "fixed size changed from 8 to 4 bytes"),
            ],
        ),
        (
            "record renamed with a reader alias",
            rec("Old", r#"{"name":"a","type":"int"}"#),
            r#"{"type":"record","name":"New","namespace":"t","aliases":["Old"],"fields":[{"name":"a","type":"int"}]}"#
                .to_string(),
            vec![
                (Backward, true, ""),
                (Forward, false, "renamed from `t.New` to `t.Old`"),
            ],
        ),
        (
            "record renamed without alias",
            rec("Old", r#"{"name":"a","type":"int"}"#),
            rec("New", r#"{"name":"a","type":"int"}"#),
            vec![
                (Backward, false, "without a reader alias"),
                (Forward, false, ""),
            ],
        ),
        (
            "field renamed with a reader field alias",
            r(r#"{"name":"a","type":"int"}"#),
            r(r#"{"name":"b","type":"int","aliases":["a"]}"#),
            vec![
                (Backward, true, ""),
                (Forward, false, "field `a` removed but it has no default"),
            ],
        ),
        (
            "nested record gains a field without default",
            r(&format!(
                r#"{{"name":"n","type":{}}}"#,
                rec("N", r#"{"name":"x","type":"int"}"#)
            )),
            r(&format!(
                r#"{{"name":"n","type":{}}}"#,
                rec(
                    "N",
                    r#"{"name":"x","type":"int"},{"name":"y","type":"int"}"#
                )
            )),
            vec![
                (Backward, false, "at `n.y`: field `y` added"),
                (Forward, true, ""),
            ],
        ),
        (
            "array of records gains a field without default",
            r(&format!(
                r#"{{"name":"xs","type":{{"type":"array","items":{}}}}}"#,
                rec("I", r#"{"name":"x","type":"int"}"#)
            )),
            r(&format!(
                r#"{{"name":"xs","type":{{"type":"array","items":{}}}}}"#,
                rec(
                    "I",
                    r#"{"name":"x","type":"int"},{"name":"y","type":"string"}"#
                )
            )),
            vec![(Backward, false, "at `xs[].y`"), (Forward, true, "")],
        ),
        (
            "map of records: value type changed",
            r(&format!(
                r#"{{"name":"m","type":{{"type":"map","values":{}}}}}"#,
                rec("V", r#"{"name":"x","type":"int"}"#)
            )),
            r(&format!(
                r#"{{"name":"m","type":{{"type":"map","values":{}}}}}"#,
                rec("V", r#"{"name":"x","type":"string"}"#)
            )),
            vec![(Backward, false, "at `m{}.x`"), (Forward, false, "m{}.x")],
        ),
        (
            "recursive type gains a defaulted field",
            node(""),
            node(r#",{"name":"w","type":"int","default":1}"#),
            vec![(Full, true, ""), (FullTransitive, true, "")],
        ),
        (
            "recursive type gains a required field",
            node(""),
            node(r#",{"name":"w","type":"int"}"#),
            vec![
                (Backward, false, "field `w` added without a default"),
                (Forward, true, ""),
            ],
        ),
        (
            "nullable record gains a defaulted field",
            r(&format!(
                r#"{{"name":"after","type":["null",{}],"default":null}}"#,
                rec("V", r#"{"name":"x","type":"int"}"#)
            )),
            r(&format!(
                r#"{{"name":"after","type":["null",{}],"default":null}}"#,
                rec(
                    "V",
                    r#"{"name":"x","type":"int"},{"name":"y","type":["null","string"],"default":null}"#
                )
            )),
            vec![(Full, true, "")],
        ),
    ]
}

fn verdict(level: CompatibilityLevel, old: &Schema, new: &Schema) -> Result<(), String> {
    check_compatibility(level, new, std::slice::from_ref(old)).map_err(|e| e.to_string())
}

#[test]
fn compatibility_table() {
    let mut failures = Vec::new();
    for (case, old, new, expectations) in cases() {
        let (old, new) = (parse(&old), parse(&new));
        for (level, compatible, fragment) in expectations {
            match (verdict(level, &old, &new), compatible) {
                (Ok(()), true) => {}
                (Err(msg), false) if msg.contains(fragment) => {}
                (got, _) => failures.push(format!(
                    "{case} under {level}: expected {}, got {got:?}",
                    if compatible {
                        "compatible".to_string()
                    } else {
                        format!("incompatible mentioning {fragment:?}")
                    }
                )),
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn transitive_levels_check_every_version() {
    let v1 = parse(&r(r#"{"name":"a","type":"int"}"#));
    let v2 = parse(&r(
        r#"{"name":"a","type":"int"},{"name":"b","type":"int","default":0}"#,
    ));
    let v3 = parse(&r(r#"{"name":"a","type":"int"},{"name":"b","type":"int"}"#));
    let prev = [v1, v2];
    assert!(check_compatibility(Backward, &v3, &prev).is_ok());
    let e = check_compatibility(BackwardTransitive, &v3, &prev).unwrap_err();
    assert_eq!(e.problems.len(), 1);
    assert!(e.problems[0].contains("version 1"), "{e}");
    assert!(e.to_string().contains("BACKWARD_TRANSITIVE"));
    // FORWARD_TRANSITIVE: v1 and v2 as readers of v3: both fine (v3 adds b).
    assert!(check_compatibility(ForwardTransitive, &v3, &prev).is_ok());
    assert!(check_compatibility(None, &v3, &prev).is_ok());
    assert!(check_compatibility(FullTransitive, &v3, &[]).is_ok());
}

#[test]
fn every_problem_is_listed() {
    let old = parse(&r(
        r#"{"name":"a","type":"int"},{"name":"s","type":"string"}"#,
    ));
    let new = parse(&r(
        r#"{"name":"a","type":"string"},{"name":"s","type":"string"},{"name":"p","type":"int"},{"name":"q","type":"long"}"#,
    ));
    let problems = can_read(&new, &old, Direction::NewReadsOld);
    let paths: Vec<_> = problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(paths, ["a", "p", "q"], "{problems:?}");
}

#[test]
fn levels_parse_and_default() {
    assert_eq!(CompatibilityLevel::default(), Backward);
    assert_eq!(
        "full_transitive".parse::<CompatibilityLevel>().unwrap(),
        FullTransitive
    );
    assert!("SIDEWAYS".parse::<CompatibilityLevel>().is_err());
    assert_eq!(ForwardTransitive.to_string(), "FORWARD_TRANSITIVE");
}

#[test]
fn derived_envelopes_evolve_compatibly() {
    // Adding a nullable column to a table keeps its envelope BACKWARD and FORWARD compatible.
    use cdc_schemas::encode::{ConnectorKind, Encoder, EncoderConfig, RecordFormat, SourceInfo};
    use cdc_schemas::{Column, ColumnType, TableId, TableSchema};
    let cfg = EncoderConfig::new(
        SourceInfo::new(ConnectorKind::Postgres, "p", "db"),
        RecordFormat::Avro,
    );
    let mut cols = vec![Column::new("id", ColumnType::Int32, "int4").not_null()];
    let t1 = TableSchema::new(TableId::new("public", "t"), cols.clone(), &["id"]).unwrap();
    cols.push(Column::new(
        "extra",
        ColumnType::Text {
            max_len: Option::None,
        },
        "text",
    ));
    let t2 = TableSchema::new(TableId::new("public", "t"), cols.clone(), &["id"]).unwrap();
    cols.push(Column::new("req", ColumnType::Int64, "int8").not_null());
    let t3 = TableSchema::new(TableId::new("public", "t"), cols, &["id"]).unwrap();
    let s = |t: &TableSchema| parse(Encoder::new(&cfg, t).unwrap().avro_value_schema());
    assert!(check_compatibility(Full, &s(&t2), &[s(&t1)]).is_ok());
    let e = check_compatibility(Backward, &s(&t3), &[s(&t2)]).unwrap_err();
    assert!(
        e.to_string()
            .contains("field `req` added without a default"),
        "{e}"
    );
}
