//! Reading configuration sections that belong to several owners (the common keys of a
//! source or sink and the keys of its kind): which keys a serde struct accepts, so the
//! list of known keys is never written twice and an unknown key can be named.

use serde::de::{self, DeserializeOwned};

/// A configuration problem: the full key path and what is wrong with it.
pub type KeyError = (String, String);

/// Deserializes `value`, found at key path `prefix` ("" for the whole file); an error is
/// the full key path of the offending value and what is wrong with it: a missing key
/// ("is required but missing"), an unknown one (with the known keys, when the struct
/// denies unknown fields), or a value of the wrong type.
pub fn deserialize_keyed<T: DeserializeOwned>(
    value: toml::Value,
    prefix: &str,
) -> Result<T, KeyError> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let inner = inner.trim_end().replace('\n', " ");
        let path = match (prefix, path.as_str()) {
            (p, ".") => p.to_string(),
            ("", q) => q.to_string(),
            (p, q) => format!("{p}.{q}"),
        };
        let join = |k: &str| {
            if path.is_empty() {
                k.to_string()
            } else {
                format!("{path}.{k}")
            }
        };
        if let Some(field) = backticked(&inner, "missing field `") {
            (join(&field), "is required but missing".to_string())
        } else if let Some(field) = backticked(&inner, "unknown field `") {
            // The path already ends at the unknown key; toml appends " in `table`".
            let expected = inner
                .split_once(", expected")
                .map(|(_, e)| e.split(" in `").next().unwrap_or(e))
                .map(|e| format!(" (known keys:{e})"))
                .unwrap_or_default();
            let key = if path.ends_with(field.as_str()) {
                path.clone()
            } else {
                join(&field)
            };
            (key, format!("unknown key{expected}"))
        } else {
            (path, inner)
        }
    })
}

fn backticked(s: &str, prefix: &str) -> Option<String> {
    let start = s.find(prefix)? + prefix.len();
    let end = s[start..].find('`')?;
    Some(s[start..start + end].to_string())
}

/// The field names a `#[derive(Deserialize)]` struct accepts (serde hands them to
/// `deserialize_struct`), so the list of known keys is never written twice.
pub fn fields_of<T: DeserializeOwned>() -> &'static [&'static str] {
    struct Probe(Option<&'static [&'static str]>);
    #[derive(Debug)]
    struct Stop;
    impl std::fmt::Display for Stop {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("probe")
        }
    }
    impl std::error::Error for Stop {}
    impl de::Error for Stop {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Stop
        }
    }
    impl<'de> de::Deserializer<'de> for &mut Probe {
        type Error = Stop;
        fn deserialize_any<V: de::Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_struct<V: de::Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Stop> {
            self.0 = Some(fields);
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
            enum identifier ignored_any
        }
    }
    let mut p = Probe(None);
    let _ = T::deserialize(&mut p);
    p.0.unwrap_or(&[])
}
