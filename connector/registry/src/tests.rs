//! Unit tests of the embedded registry: reopen, crash, compatibility, deletes, config.

use cdc_log::{Log, LogOptions};
use cdc_schemas::compat::CompatibilityLevel;
use cdc_schemas::registry::{RegistryError, Schema, SchemaRegistry, VersionRef};

use crate::embedded::codes;
use crate::EmbeddedRegistry;

fn open(dir: &std::path::Path) -> EmbeddedRegistry {
    let log = Log::open(dir, LogOptions::default()).unwrap();
    EmbeddedRegistry::open(log).unwrap()
}

/// A record schema with the given fields; each field is `(name, type, default)`.
pub(crate) fn rec(fields: &[(&str, &str, Option<&str>)]) -> Schema {
    let fs: Vec<String> = fields
        .iter()
        .map(|(n, t, d)| match d {
            Some(d) => format!(r#"{{"name":"{n}","type":{t},"default":{d}}}"#),
            None => format!(r#"{{"name":"{n}","type":{t}}}"#),
        })
        .collect();
    Schema::avro(format!(
        r#"{{"type":"record","name":"Value","namespace":"app","fields":[{}]}}"#,
        fs.join(",")
    ))
}

fn v1() -> Schema {
    rec(&[("id", "\"int\"", None)])
}
fn v2() -> Schema {
    rec(&[
        ("id", "\"int\"", None),
        ("name", "\"string\"", Some("\"\"")),
    ])
}
/// Adds a field without a default: not BACKWARD compatible with v1/v2.
fn bad() -> Schema {
    rec(&[("id", "\"int\"", None), ("qty", "\"long\"", None)])
}

#[tokio::test]
async fn register_lookup_and_ids_stable_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (id1, id2);
    {
        let r = open(dir.path());
        id1 = r.register("t-value", &v1()).await.unwrap();
        assert_eq!(id1, 1);
        // Same schema (different text, same canonical form) → same id and version.
        let v1_pretty = Schema::avro(
            r#"{ "type": "record", "name": "app.Value", "doc": "d", "fields": [ {"name": "id", "type": "int"} ] }"#,
        );
        assert_eq!(r.register("t-value", &v1_pretty).await.unwrap(), id1);
        assert_eq!(r.versions("t-value", false).unwrap(), vec![1]);
        id2 = r.register("t-value", &v2()).await.unwrap();
        assert_eq!(id2, 2);
        // Same schema under another subject reuses the global id, version 1 there.
        assert_eq!(r.register("other-value", &v1()).await.unwrap(), id1);
        let found = r.lookup("other-value", &v1()).await.unwrap().unwrap();
        assert_eq!((found.version, found.id), (1, id1));
        assert!(r.lookup("other-value", &v2()).await.unwrap().is_none());
        assert!(r.lookup("nope", &v2()).await.unwrap().is_none());
        let latest = r.version("t-value", VersionRef::Latest).await.unwrap();
        assert_eq!((latest.version, latest.id), (2, id2));
        assert_eq!(r.schema_by_id(id2).await.unwrap(), v2());
        assert!(matches!(
            r.schema_by_id(99).await,
            Err(RegistryError::SchemaNotFound { id: 99 })
        ));
    }
    // Reopen: everything is back, and new ids continue after the old ones.
    let r = open(dir.path());
    assert_eq!(r.subjects(false), vec!["other-value", "t-value"]);
    assert_eq!(r.versions("t-value", false).unwrap(), vec![1, 2]);
    assert_eq!(r.register("t-value", &v2()).await.unwrap(), id2);
    assert_eq!(r.register("other-value", &v2()).await.unwrap(), id2);
    let v3 = rec(&[
        ("id", "\"int\"", None),
        ("name", "\"string\"", Some("\"\"")),
        ("z", "\"int\"", Some("0")),
    ]);
    assert_eq!(r.register("t-value", &v3).await.unwrap(), 3);
    assert_eq!(
        r.version("t-value", VersionRef::Number(3))
            .await
            .unwrap()
            .id,
        3
    );
}

#[tokio::test]
async fn registration_survives_a_crash_and_does_not_touch_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let id;
    {
        let log = Log::open(dir.path(), LogOptions::default()).unwrap();
        // The pipeline's checkpoint, and some unflushed pipeline records.
        let t = log
            .topic_or_create("app.t", cdc_log::TopicConfig::with_partitions(1))
            .unwrap();
        t.append(0, &[cdc_log::NewRecord::new(Some(b"k"), Some(b"v"), 1)])
            .unwrap();
        log.flush(Some(b"lsn:1")).unwrap();
        t.append(0, &[cdc_log::NewRecord::new(Some(b"k"), Some(b"v2"), 2)])
            .unwrap();
        let r = EmbeddedRegistry::open(log.clone()).unwrap();
        id = r.register("t-value", &v1()).await.unwrap();
        assert_eq!(log.checkpoint().as_deref(), Some(&b"lsn:1"[..]));
        // Crash: drop everything without any further flush.
    }
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    assert_eq!(log.checkpoint().as_deref(), Some(&b"lsn:1"[..]));
    let r = EmbeddedRegistry::open(log).unwrap();
    assert_eq!(r.lookup_sync("t-value", &v1(), false).unwrap().id, id);
    assert_eq!(r.register("t-value", &v1()).await.unwrap(), id);
    assert_eq!(r.register("t-value", &v2()).await.unwrap(), id + 1);
}

#[tokio::test]
async fn incompatible_rejected_with_messages() {
    let dir = tempfile::tempdir().unwrap();
    let r = open(dir.path());
    r.register("t-value", &v1()).await.unwrap();
    let err = r.register("t-value", &bad()).await.unwrap_err();
    match &err {
        RegistryError::Incompatible {
            subject,
            level,
            messages,
        } => {
            assert_eq!(subject, "t-value");
            assert_eq!(*level, CompatibilityLevel::Backward);
            assert!(messages.iter().any(|m| m.contains("qty")), "{messages:?}");
        }
        other => panic!("{other:?}"),
    }
    assert!(!err.is_transient());
    assert_eq!(err.error_code(), 409);
    // Nothing was stored; the next id is still 2.
    assert_eq!(r.versions("t-value", false).unwrap(), vec![1]);
    assert_eq!(r.register("t-value", &v2()).await.unwrap(), 2);
    // An invalid schema is 42201.
    let e = r
        .register("t-value", &Schema::avro("{\"type\":\"recrd\"}"))
        .await
        .unwrap_err();
    assert_eq!(e.error_code(), 42201);
}

#[tokio::test]
async fn compatibility_levels_incl_transitive() {
    let dir = tempfile::tempdir().unwrap();
    let r = open(dir.path());
    // v1: {id}, v2: {id, name default} (backward ok), v3: drops `id` default-less... build a
    // chain that is compatible step by step but not transitively:
    // a: {x:int}, b: {x:int, y:string default ""} , c: {y:string} (x removed: backward ok
    // vs b since reader c ignores x; vs a: c reads a's data: y missing in a but c's y has no
    // default → incompatible).
    let a = rec(&[("x", "\"int\"", None)]);
    let b = rec(&[("x", "\"int\"", None), ("y", "\"string\"", Some("\"\""))]);
    let c = rec(&[("y", "\"string\"", None)]);
    r.register("s", &a).await.unwrap();
    r.register("s", &b).await.unwrap();
    r.set_compatibility(Some("s"), CompatibilityLevel::BackwardTransitive)
        .await
        .unwrap();
    assert_eq!(
        r.compatibility(Some("s")).await.unwrap(),
        CompatibilityLevel::BackwardTransitive
    );
    let e = r.register("s", &c).await.unwrap_err();
    match e {
        RegistryError::Incompatible {
            level, messages, ..
        } => {
            assert_eq!(level, CompatibilityLevel::BackwardTransitive);
            assert!(
                messages.iter().any(|m| m.contains("version 1")),
                "{messages:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Non-transitive BACKWARD checks the latest only: accepted.
    r.set_compatibility(Some("s"), CompatibilityLevel::Backward)
        .await
        .unwrap();
    let id_c = r.register("s", &c).await.unwrap();
    assert_eq!(r.versions("s", false).unwrap(), vec![1, 2, 3]);

    // FORWARD: old reads new. Removing a field without default from the new schema breaks
    // it (old reader needs y).
    r.set_compatibility(Some("s"), CompatibilityLevel::Forward)
        .await
        .unwrap();
    let d = rec(&[("z", "\"int\"", Some("0"))]);
    assert!(matches!(
        r.register("s", &d).await,
        Err(RegistryError::Incompatible { .. })
    ));
    // FULL: adding an optional field with default is fine both ways.
    r.set_compatibility(Some("s"), CompatibilityLevel::Full)
        .await
        .unwrap();
    let e2 = rec(&[("y", "\"string\"", None), ("w", "\"int\"", Some("1"))]);
    assert!(r.register("s", &e2).await.unwrap() > id_c);
    // NONE: anything goes.
    r.set_compatibility(Some("s"), CompatibilityLevel::None)
        .await
        .unwrap();
    r.register("s", &d).await.unwrap();
    // Global level applies to subjects without their own; config survives reopen.
    r.set_compatibility(None, CompatibilityLevel::Forward)
        .await
        .unwrap();
    drop(r);
    let r = open(dir.path());
    assert_eq!(r.subject_compatibility("s"), Some(CompatibilityLevel::None));
    assert_eq!(r.global_compatibility(), CompatibilityLevel::Forward);
    assert_eq!(
        r.compatibility(Some("other")).await.unwrap(),
        CompatibilityLevel::Forward
    );
    assert_eq!(
        r.delete_compatibility("s").unwrap(),
        CompatibilityLevel::None
    );
    assert_eq!(
        r.compatibility(Some("s")).await.unwrap(),
        CompatibilityLevel::Forward
    );
    assert_eq!(
        r.delete_compatibility("s").unwrap_err().error_code(),
        codes::SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED
    );
    // The same through the trait: no own level is `None`, and deleting none is fine.
    let dynr: &dyn SchemaRegistry = &r;
    assert_eq!(dynr.subject_compatibility("s").await.unwrap(), None);
    dynr.delete_subject_compatibility("s").await.unwrap();
    dynr.set_compatibility(Some("s"), CompatibilityLevel::Full)
        .await
        .unwrap();
    assert_eq!(
        dynr.subject_compatibility("s").await.unwrap(),
        Some(CompatibilityLevel::Full)
    );
    dynr.delete_subject_compatibility("s").await.unwrap();
    assert_eq!(r.subject_compatibility("s"), None);
}

#[tokio::test]
async fn soft_and_permanent_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let r = open(dir.path());
    let id1 = r.register("s", &v1()).await.unwrap();
    let id2 = r.register("s", &v2()).await.unwrap();
    // Permanent before soft: refused.
    assert_eq!(
        r.delete_version("s", VersionRef::Number(1), true)
            .unwrap_err()
            .error_code(),
        codes::VERSION_NOT_SOFT_DELETED
    );
    assert_eq!(
        r.delete_subject("s", true).unwrap_err().error_code(),
        codes::SUBJECT_NOT_SOFT_DELETED
    );
    // Soft delete of version 2: latest is 1 again, v2 still readable with deleted=true,
    // its id still resolves.
    assert_eq!(r.delete_version("s", VersionRef::Latest, false).unwrap(), 2);
    assert_eq!(
        r.version_sync("s", VersionRef::Latest, false)
            .unwrap()
            .version,
        1
    );
    assert_eq!(
        r.version_sync("s", VersionRef::Number(2), true).unwrap().id,
        id2
    );
    assert!(matches!(
        r.version_sync("s", VersionRef::Number(2), false),
        Err(RegistryError::VersionNotFound { .. })
    ));
    assert_eq!(
        r.delete_version("s", VersionRef::Number(2), false)
            .unwrap_err()
            .error_code(),
        codes::VERSION_SOFT_DELETED
    );
    assert_eq!(r.schema_by_id_sync(id2).unwrap(), v2());
    // Soft delete the subject: gone from listings unless deleted=true.
    assert_eq!(r.delete_subject("s", false).unwrap(), vec![1]);
    assert!(r.subjects(false).is_empty());
    assert_eq!(r.subjects(true), vec!["s"]);
    assert!(matches!(
        r.versions("s", false),
        Err(RegistryError::SubjectNotFound { .. })
    ));
    assert_eq!(r.versions("s", true).unwrap(), vec![1, 2]);
    assert_eq!(
        r.delete_subject("s", false).unwrap_err().error_code(),
        codes::SUBJECT_SOFT_DELETED
    );
    // State survives reopen.
    drop(r);
    let r = open(dir.path());
    assert_eq!(r.subjects(true), vec!["s"]);
    assert!(r.subjects(false).is_empty());
    // Re-registering a soft-deleted schema: same id, next version number.
    assert_eq!(r.register("s", &v1()).await.unwrap(), id1);
    assert_eq!(r.versions("s", false).unwrap(), vec![3]);
    r.delete_subject("s", false).unwrap();
    // Permanent: gone, ids not reused, even after reopen.
    assert_eq!(r.delete_subject("s", true).unwrap(), vec![1, 2, 3]);
    assert!(r.subjects(true).is_empty());
    assert!(r.schema_by_id_sync(id2).is_err());
    drop(r);
    let r = open(dir.path());
    assert!(r.subjects(true).is_empty());
    let v3 = rec(&[("q", "\"int\"", None)]);
    assert_eq!(r.register("s", &v3).await.unwrap(), 3);
    assert_eq!(r.versions("s", false).unwrap(), vec![1]);
    // Single-version permanent delete after soft.
    r.delete_version("s", VersionRef::Number(1), false).unwrap();
    assert_eq!(
        r.delete_version("s", VersionRef::Number(1), true).unwrap(),
        1
    );
    assert!(r.subjects(true).is_empty());
}

#[tokio::test]
async fn default_level_option_and_json_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default()).unwrap();
    let r = EmbeddedRegistry::open_with(
        log,
        crate::EmbeddedOptions {
            default_compatibility: CompatibilityLevel::None,
        },
    )
    .unwrap();
    r.register("s", &v1()).await.unwrap();
    r.register("s", &bad()).await.unwrap();
    let j = Schema {
        schema_type: cdc_schemas::registry::SchemaType::Json,
        text: r#"{"type":"object"}"#.into(),
        references: vec![],
    };
    let id = r.register("j", &j).await.unwrap();
    assert_eq!(r.schema_by_id_sync(id).unwrap(), j);
    let protobuf = Schema {
        schema_type: cdc_schemas::registry::SchemaType::Protobuf,
        text: "syntax = \"proto3\";".into(),
        references: vec![],
    };
    assert_eq!(
        r.register("p", &protobuf).await.unwrap_err().error_code(),
        42201
    );
    // Usable as a trait object.
    let dynr: std::sync::Arc<dyn SchemaRegistry> = std::sync::Arc::new(r);
    assert_eq!(dynr.register("j", &j).await.unwrap(), id);
}
