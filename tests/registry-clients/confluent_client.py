"""Drives Confluent's Python client (confluent-kafka[avro,schemaregistry]) against a
schema registry; run by tests/tests/registry.rs. Prints one JSON object on stdout.

  confluent_client.py URL roundtrip
      SchemaRegistryClient: register, lookup_schema, get_schema, get_latest_version,
      get_versions, set/get compatibility, test_compatibility, error codes; then an
      AvroSerializer/AvroDeserializer round trip through the registry.
  confluent_client.py URL decode TOPIC KEYFILE VALUEFILE
      AvroDeserializer decodes a key and a value in the Confluent wire format (written by
      the Rust side with cdc_schemas' encoder) and prints them as JSON.
"""

import base64
import decimal
import json
import sys

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext


def plain(v):
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return {"base64": base64.b64encode(v).decode()}
    if isinstance(v, decimal.Decimal):
        return {"decimal": str(v)}
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


def err(f):
    try:
        f()
    except SchemaRegistryError as e:
        return {"http": e.http_status_code, "code": e.error_code}
    return None


def roundtrip(url):
    sr = SchemaRegistryClient({"url": url})
    out = {}
    v1 = json.dumps({
        "type": "record", "name": "Order", "namespace": "py",
        "fields": [{"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None}],
    })
    v2 = json.dumps({
        "type": "record", "name": "Order", "namespace": "py",
        "fields": [{"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None},
                   {"name": "qty", "type": "int", "default": 1}],
    })
    bad = json.dumps({
        "type": "record", "name": "Order", "namespace": "py",
        "fields": [{"name": "id", "type": "string"}],
    })
    subject = "py-orders-value"
    out["id1"] = sr.register_schema(subject, Schema(v1, "AVRO"))
    out["id1_again"] = sr.register_schema(subject, Schema(v1, "AVRO"))
    reg = sr.lookup_schema(subject, Schema(v1, "AVRO"))
    out["lookup"] = {"subject": reg.subject, "version": reg.version, "id": reg.schema_id}
    out["by_id_equal"] = json.loads(sr.get_schema(out["id1"]).schema_str) == json.loads(v1)
    out["compat_v2"] = sr.test_compatibility(subject, Schema(v2, "AVRO"))
    out["compat_bad"] = sr.test_compatibility(subject, Schema(bad, "AVRO"))
    out["id2"] = sr.register_schema(subject, Schema(v2, "AVRO"))
    latest = sr.get_latest_version(subject)
    out["latest"] = {"version": latest.version, "id": latest.schema_id}
    out["versions"] = sr.get_versions(subject)
    out["subjects"] = sr.get_subjects()
    out["set_compat"] = sr.set_compatibility(subject, "FULL")
    out["get_compat"] = sr.get_compatibility(subject)
    out["err_incompatible"] = err(lambda: sr.register_schema(subject, Schema(bad, "AVRO")))
    out["err_no_id"] = err(lambda: sr.get_schema(999999))
    out["err_no_subject"] = err(lambda: sr.get_latest_version("no-such-subject"))
    out["err_lookup_missing"] = err(lambda: sr.lookup_schema(subject, Schema(bad, "AVRO")))
    out["err_invalid"] = err(lambda: sr.register_schema("py-invalid", Schema('{"type":"nope"}', "AVRO")))

    # Serializer / deserializer through the registry (auto-registers "py-rt-value").
    rt_schema = json.dumps({
        "type": "record", "name": "Item", "namespace": "py",
        "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"},
                   {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
                   {"name": "tags", "type": {"type": "array", "items": "string"}}],
    })
    ser = AvroSerializer(sr, rt_schema)
    des = AvroDeserializer(sr)
    ctx = SerializationContext("py-rt", MessageField.VALUE)
    record = {"id": 42, "name": "widget", "price": decimal.Decimal("12.34"), "tags": ["a", "b"]}
    data = ser(record, ctx)
    out["wire_magic"] = data[0]
    out["wire_id"] = int.from_bytes(data[1:5], "big")
    out["roundtrip"] = plain(des(data, ctx))
    out["rt_subjects"] = sr.get_subjects()
    return out


def decode(url, topic, key_file, value_file):
    sr = SchemaRegistryClient({"url": url})
    des = AvroDeserializer(sr)
    with open(key_file, "rb") as f:
        key = f.read()
    with open(value_file, "rb") as f:
        value = f.read()
    return {
        "key_id": int.from_bytes(key[1:5], "big"),
        "value_id": int.from_bytes(value[1:5], "big"),
        "key": plain(des(key, SerializationContext(topic, MessageField.KEY))),
        "value": plain(des(value, SerializationContext(topic, MessageField.VALUE))),
    }


def main():
    url, mode = sys.argv[1], sys.argv[2]
    if mode == "roundtrip":
        out = roundtrip(url)
    elif mode == "decode":
        out = decode(url, *sys.argv[3:6])
    else:
        raise SystemExit("unknown mode " + mode)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
