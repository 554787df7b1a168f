//! Every endpoint of the Confluent REST API and its error codes, over a real socket.

mod common;

use common::{rec, serve};
use reqwest::Client;
use serde_json::{json, Value as J};

const CT: &str = "application/vnd.schemaregistry.v1+json";

struct Api {
    c: Client,
    base: String,
}

impl Api {
    async fn req(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<J>,
        ct: &str,
    ) -> (u16, J, String) {
        let mut r = self.c.request(method, format!("{}{}", self.base, path));
        if let Some(b) = body {
            r = r.header("Content-Type", ct).body(b.to_string());
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        let ctype = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let text = resp.text().await.unwrap();
        let v = serde_json::from_str(&text).unwrap_or(J::String(text));
        (status, v, ctype)
    }
    async fn get(&self, path: &str) -> (u16, J) {
        let (s, v, ct) = self.req(reqwest::Method::GET, path, None, CT).await;
        assert_eq!(ct, CT, "content type of GET {path}");
        (s, v)
    }
    async fn post(&self, path: &str, body: J) -> (u16, J) {
        let (s, v, _) = self.req(reqwest::Method::POST, path, Some(body), CT).await;
        (s, v)
    }
    async fn put(&self, path: &str, body: J) -> (u16, J) {
        let (s, v, _) = self.req(reqwest::Method::PUT, path, Some(body), CT).await;
        (s, v)
    }
    async fn delete(&self, path: &str) -> (u16, J) {
        let (s, v, _) = self.req(reqwest::Method::DELETE, path, None, CT).await;
        (s, v)
    }
}

fn code(v: &J) -> u64 {
    assert!(v["message"].is_string(), "error body without message: {v}");
    v["error_code"]
        .as_u64()
        .unwrap_or_else(|| panic!("no error_code: {v}"))
}

#[tokio::test]
async fn every_endpoint_and_error_code() {
    let served = serve().await;
    let api = Api {
        c: Client::new(),
        base: served.url(),
    };
    let v1 = rec(&[("id", "\"int\"", None)]);
    let v2 = rec(&[("id", "\"int\"", None), ("n", "\"string\"", Some("\"x\""))]);
    let bad = rec(&[("id", "\"int\"", None), ("q", "\"long\"", None)]);

    assert_eq!(api.get("/").await, (200, json!({})));
    assert_eq!(api.get("/subjects").await, (200, json!([])));
    assert_eq!(
        api.get("/schemas/types").await,
        (200, json!(["JSON", "AVRO"]))
    );

    // Register (three accepted content types), idempotent.
    assert_eq!(
        api.post("/subjects/t-value/versions", json!({"schema": v1}))
            .await,
        (200, json!({"id": 1}))
    );
    let (s, v, _) = api
        .req(
            reqwest::Method::POST,
            "/subjects/t-value/versions",
            Some(json!({"schema": v1, "schemaType": "AVRO", "references": []})),
            "application/json",
        )
        .await;
    assert_eq!((s, v), (200, json!({"id": 1})));
    let (s, v, _) = api
        .req(
            reqwest::Method::POST,
            "/subjects/t-value/versions",
            Some(json!({"schema": v2})),
            "application/vnd.schemaregistry+json",
        )
        .await;
    assert_eq!((s, v), (200, json!({"id": 2})));
    // Same schema, another subject: same id.
    assert_eq!(
        api.post("/subjects/u-value/versions", json!({"schema": v2}))
            .await,
        (200, json!({"id": 2}))
    );

    // 409 incompatible; 42201 invalid schema / body; 40401 unknown subject.
    let (s, v) = api
        .post("/subjects/t-value/versions", json!({"schema": bad}))
        .await;
    assert_eq!((s, code(&v)), (409, 409));
    assert!(
        v["message"].as_str().unwrap().contains("incompatible"),
        "{v}"
    );
    let (s, v) = api
        .post(
            "/subjects/t-value/versions",
            json!({"schema": "{\"type\":\"wat\"}"}),
        )
        .await;
    assert_eq!((s, code(&v)), (422, 42201));
    let (s, v) = api
        .post("/subjects/t-value/versions", json!({"nothing": 1}))
        .await;
    assert_eq!((s, code(&v)), (422, 42201));
    let (s, v) = api
        .post(
            "/subjects/p/versions",
            json!({"schema": "syntax = \"proto3\";", "schemaType": "PROTOBUF"}),
        )
        .await;
    assert_eq!((s, code(&v)), (422, 42201));

    // Listing and reading versions.
    assert_eq!(
        api.get("/subjects").await,
        (200, json!(["t-value", "u-value"]))
    );
    assert_eq!(
        api.get("/subjects?subjectPrefix=t").await,
        (200, json!(["t-value"]))
    );
    assert_eq!(
        api.get("/subjects/t-value/versions").await,
        (200, json!([1, 2]))
    );
    assert_eq!(
        api.get("/subjects/t-value/versions/1").await,
        (
            200,
            json!({"subject": "t-value", "version": 1, "id": 1, "schema": v1})
        )
    );
    assert_eq!(
        api.get("/subjects/t-value/versions/latest").await.1["version"],
        json!(2)
    );
    assert_eq!(
        api.get("/subjects/t-value/versions/-1").await.1["version"],
        json!(2)
    );
    let (s, raw) = api.get("/subjects/t-value/versions/1/schema").await;
    assert_eq!((s, raw), (200, serde_json::from_str::<J>(&v1).unwrap()));
    let (s, v) = api.get("/subjects/t-value/versions/9").await;
    assert_eq!((s, code(&v)), (404, 40402));
    let (s, v) = api.get("/subjects/t-value/versions/0").await;
    assert_eq!((s, code(&v)), (422, 42202));
    let (s, v) = api.get("/subjects/t-value/versions/abc").await;
    assert_eq!((s, code(&v)), (422, 42202));
    let (s, v) = api.get("/subjects/nope/versions").await;
    assert_eq!((s, code(&v)), (404, 40401));
    let (s, v) = api.get("/subjects/nope/versions/latest").await;
    assert_eq!((s, code(&v)), (404, 40401));

    // Lookup: found, 40403 schema not found, 40401 subject not found.
    assert_eq!(
        api.post("/subjects/t-value", json!({"schema": v2})).await,
        (
            200,
            json!({"subject": "t-value", "version": 2, "id": 2, "schema": v2})
        )
    );
    let (s, v) = api.post("/subjects/t-value", json!({"schema": bad})).await;
    assert_eq!((s, code(&v)), (404, 40403));
    let (s, v) = api.post("/subjects/nope", json!({"schema": v1})).await;
    assert_eq!((s, code(&v)), (404, 40401));

    // By id.
    assert_eq!(
        api.get("/schemas/ids/1").await,
        (200, json!({"schema": v1}))
    );
    assert_eq!(
        api.get("/schemas/ids/1/schema").await.1,
        serde_json::from_str::<J>(&v1).unwrap()
    );
    assert_eq!(
        api.get("/schemas/ids/2/subjects").await,
        (200, json!(["t-value", "u-value"]))
    );
    assert_eq!(
        api.get("/schemas/ids/2/versions").await,
        (
            200,
            json!([{"subject": "t-value", "version": 2}, {"subject": "u-value", "version": 1}])
        )
    );
    let (s, v) = api.get("/schemas/ids/77").await;
    assert_eq!((s, code(&v)), (404, 40403));
    let (s, v) = api.get("/schemas/ids/x").await;
    assert_eq!((s, code(&v)), (404, 40403));

    // JSON schemas carry schemaType.
    let js = r#"{"type":"object","properties":{"a":{"type":"string"}}}"#;
    let (s, v) = api
        .post(
            "/subjects/j-value/versions",
            json!({"schema": js, "schemaType": "JSON"}),
        )
        .await;
    assert_eq!(s, 200);
    let jid = v["id"].as_u64().unwrap();
    assert_eq!(
        api.get(&format!("/schemas/ids/{jid}")).await.1,
        json!({"schema": js, "schemaType": "JSON"})
    );
    assert_eq!(
        api.get("/subjects/j-value/versions/1").await.1["schemaType"],
        json!("JSON")
    );

    // Compatibility checks.
    assert_eq!(
        api.post(
            "/compatibility/subjects/t-value/versions/latest",
            json!({"schema": v2})
        )
        .await,
        (200, json!({"is_compatible": true}))
    );
    assert_eq!(
        api.post(
            "/compatibility/subjects/t-value/versions/1",
            json!({"schema": bad})
        )
        .await,
        (200, json!({"is_compatible": false}))
    );
    let (s, v) = api
        .post(
            "/compatibility/subjects/t-value/versions/latest?verbose=true",
            json!({"schema": bad}),
        )
        .await;
    assert_eq!((s, &v["is_compatible"]), (200, &json!(false)));
    assert!(v["messages"][0].as_str().unwrap().contains('q'), "{v}");
    assert_eq!(
        api.post(
            "/compatibility/subjects/t-value/versions?verbose=true",
            json!({"schema": v2})
        )
        .await,
        (200, json!({"is_compatible": true, "messages": []}))
    );
    let (s, v) = api
        .post(
            "/compatibility/subjects/nope/versions/latest",
            json!({"schema": v2}),
        )
        .await;
    assert_eq!((s, code(&v)), (404, 40401));
    let (s, v) = api
        .post(
            "/compatibility/subjects/t-value/versions/5",
            json!({"schema": v2}),
        )
        .await;
    assert_eq!((s, code(&v)), (404, 40402));

    // Config: global and per subject, Confluent's field names.
    assert_eq!(
        api.get("/config").await,
        (200, json!({"compatibilityLevel": "BACKWARD"}))
    );
    assert_eq!(
        api.put("/config", json!({"compatibility": "FULL"})).await,
        (200, json!({"compatibility": "FULL"}))
    );
    assert_eq!(
        api.get("/config").await,
        (200, json!({"compatibilityLevel": "FULL"}))
    );
    let (s, v) = api.get("/config/t-value").await;
    assert_eq!((s, code(&v)), (404, 40408));
    assert_eq!(
        api.get("/config/t-value?defaultToGlobal=true").await,
        (200, json!({"compatibilityLevel": "FULL"}))
    );
    assert_eq!(
        api.put("/config/t-value", json!({"compatibility": "none"}))
            .await,
        (200, json!({"compatibility": "NONE"}))
    );
    assert_eq!(
        api.get("/config/t-value").await,
        (200, json!({"compatibilityLevel": "NONE"}))
    );
    let (s, v) = api
        .put("/config/t-value", json!({"compatibility": "SIDEWAYS"}))
        .await;
    assert_eq!((s, code(&v)), (422, 42203));
    // With NONE, the incompatible schema is accepted.
    assert_eq!(
        api.post("/subjects/t-value/versions", json!({"schema": bad}))
            .await
            .0,
        200
    );
    assert_eq!(
        api.delete("/config/t-value").await,
        (200, json!({"compatibilityLevel": "NONE"}))
    );
    let (s, v) = api.delete("/config/t-value").await;
    assert_eq!((s, code(&v)), (404, 40408));
    assert_eq!(
        api.delete("/config").await,
        (200, json!({"compatibilityLevel": "FULL"}))
    );
    assert_eq!(
        api.get("/config").await,
        (200, json!({"compatibilityLevel": "BACKWARD"}))
    );
    assert_eq!(api.get("/mode").await, (200, json!({"mode": "READWRITE"})));

    // Deletes: version soft/permanent, subject soft/permanent, and their errors.
    let (s, v) = api
        .delete("/subjects/t-value/versions/3?permanent=true")
        .await;
    assert_eq!((s, code(&v)), (404, 40407));
    assert_eq!(
        api.delete("/subjects/t-value/versions/3").await,
        (200, json!(3))
    );
    let (s, v) = api.delete("/subjects/t-value/versions/3").await;
    assert_eq!((s, code(&v)), (404, 40406));
    assert_eq!(api.get("/subjects/t-value/versions").await.1, json!([1, 2]));
    assert_eq!(
        api.get("/subjects/t-value/versions?deleted=true").await.1,
        json!([1, 2, 3])
    );
    assert_eq!(
        api.get("/subjects/t-value/versions/3?deleted=true").await.1["version"],
        json!(3)
    );
    assert_eq!(
        api.delete("/subjects/t-value/versions/3?permanent=true")
            .await,
        (200, json!(3))
    );
    assert_eq!(
        api.get("/subjects/t-value/versions?deleted=true").await.1,
        json!([1, 2])
    );
    let (s, v) = api.delete("/subjects/t-value?permanent=true").await;
    assert_eq!((s, code(&v)), (404, 40405));
    assert_eq!(api.delete("/subjects/t-value").await, (200, json!([1, 2])));
    let (s, v) = api.delete("/subjects/t-value").await;
    assert_eq!((s, code(&v)), (404, 40404));
    assert_eq!(api.get("/subjects").await.1, json!(["j-value", "u-value"]));
    assert_eq!(
        api.get("/subjects?deleted=true").await.1,
        json!(["j-value", "t-value", "u-value"])
    );
    let (s, v) = api.get("/subjects/t-value/versions").await;
    assert_eq!((s, code(&v)), (404, 40401));
    assert_eq!(
        api.delete("/subjects/t-value?permanent=true").await,
        (200, json!([1, 2]))
    );
    assert_eq!(
        api.get("/subjects?deleted=true").await.1,
        json!(["j-value", "u-value"])
    );
    let (s, v) = api.delete("/subjects/t-value").await;
    assert_eq!((s, code(&v)), (404, 40401));
    // Id 1 (only t-value held it) is gone; id 2 still served through u-value.
    assert_eq!(api.get("/schemas/ids/1").await.0, 404);
    assert_eq!(api.get("/schemas/ids/2").await.0, 200);

    // Feature probes and unknown paths: Confluent-style 404 bodies.
    let (s, v) = api
        .get("/associations/resources/-/t?resourceType=topic&associationTypes=value")
        .await;
    assert_eq!((s, code(&v)), (404, 404));
    let (s, v) = api.get("/no/such/path").await;
    assert_eq!((s, code(&v)), (404, 404));
    drop(served);
}

#[tokio::test]
async fn concurrent_registrations_get_distinct_stable_ids() {
    let served = serve().await;
    let c = Client::new();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let c = c.clone();
        let url = served.url();
        tasks.push(tokio::spawn(async move {
            let schema = rec(&[(&format!("f{i}"), "\"int\"", None)]);
            let r: J = c
                .post(format!("{url}/subjects/s{i}-value/versions"))
                .header("Content-Type", CT)
                .body(json!({ "schema": schema }).to_string())
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            r["id"].as_u64().unwrap()
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.unwrap());
    }
    ids.sort_unstable();
    assert_eq!(ids, (1..=16).collect::<Vec<u64>>());
    assert_eq!(served.registry.subjects(false).len(), 16);
}
