//! What a command reads from the caller beyond its flags: `namespace/name`, and the YAML or JSON
//! documents of input files, decoded with errors that name the field, never the value. Apart
//! because `apply`, `machine` and `volume` all read input this one way.

use std::path::Path;

use crate::CliError;

/// Splits `namespace/name`, taking the namespace from `-n` (or `default`) when the name has none.
/// Both at once must agree: `ns/name -n other` is refused rather than one silently winning.
pub fn split_name(name: &str, namespace: Option<&str>) -> Result<(String, String), CliError> {
    match name.split_once('/') {
        Some((ns, n)) => match namespace {
            Some(flag) if flag != ns => Err(CliError::Usage(format!(
                "{name:?} names namespace {ns:?} but -n/--namespace says {flag:?}; give one of them"
            ))),
            _ => Ok((ns.to_string(), n.to_string())),
        },
        None => Ok((
            namespace
                .unwrap_or(domain::volume::DEFAULT_NAMESPACE)
                .to_string(),
            name.to_string(),
        )),
    }
}

/// The YAML or JSON documents of a file (`---` separates several), empty ones skipped.
pub fn read_structured(path: &Path) -> Result<Vec<serde_json::Value>, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?;
    parse_structured(&path.display().to_string(), &text)
}

/// The documents of YAML or JSON `text` (several YAML documents separated by `---`), read from
/// `source` (a file's name, or standard input).
pub fn parse_structured(source: &str, text: &str) -> Result<Vec<serde_json::Value>, CliError> {
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let Document(value) = <Document as serde::Deserialize>::deserialize(doc)
            .map_err(|e| CliError::Usage(format!("{source}: not YAML or JSON: {e}")))?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

/// A document's value, read as `serde_json::Value` reads one except that a mapping with the same
/// key twice is refused, as kubectl refuses it: the last one silently winning hides a typo, or
/// a field pasted twice with two values.
struct Document(serde_json::Value);

impl<'de> serde::Deserialize<'de> for Document {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(DocumentVisitor).map(Document)
    }
}

struct DocumentVisitor;

impl<'de> serde::de::Visitor<'de> for DocumentVisitor {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a YAML or JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        // As serde_json reads one: a number JSON cannot hold (NaN, infinities) is null.
        Ok(serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, Into::into))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        <Document as serde::Deserialize>::deserialize(d).map(|Document(v)| v)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Document(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(items.into())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Document(value) = map.next_value()?;
            if fields.contains_key(&key) {
                // The key is the caller's field name, not a value: naming it says what to fix.
                return Err(serde::de::Error::custom(format!(
                    "the key {key:?} appears twice in one mapping"
                )));
            }
            fields.insert(key, value);
        }
        Ok(fields.into())
    }
}

/// Decodes one document; the error names what it should have been and the field, never a value.
pub fn decode<T: serde::de::DeserializeOwned>(
    what: &str,
    value: serde_json::Value,
) -> Result<T, CliError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let why = inner.to_string();
        // serde's messages quote the offending value for some errors ("invalid value: string
        // \"x\""); keep only what was expected.
        let why = why
            .split_once(", expected ")
            .map(|(_, expected)| format!("expected {expected}"))
            .unwrap_or(why);
        if path == "." {
            CliError::Usage(format!("{what}: {why}"))
        } else {
            CliError::Usage(format!("{what}: {path}: {why}"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_twice_in_one_mapping_is_refused_and_named() {
        for text in [
            "kind: Machine\nkind: MachineSet\n",
            "spec:\n  replicas: 1\n  replicas: 3\n",
            r#"{"metadata": {"name": "a", "name": "b"}}"#,
        ] {
            let Err(CliError::Usage(e)) = parse_structured("f.yaml", text) else {
                panic!("{text}: not refused as a usage error");
            };
            assert!(e.contains("appears twice"), "{text}: {e}");
            assert!(
                !e.contains("MachineSet") && !e.contains("\"b\""),
                "no value in: {e}"
            );
        }
        // The same key in two mappings, or in two documents, is no repeat.
        let docs = parse_structured(
            "f.yaml",
            "a: {name: x, n: 1.5, on: true, none: ~, list: [1, -2]}\nb: {name: y}\n---\na: 2\n",
        )
        .unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(
            docs[0],
            serde_json::json!({"a": {"name": "x", "n": 1.5, "on": true, "none": null, "list": [1, -2]}, "b": {"name": "y"}})
        );
        assert_eq!(docs[1], serde_json::json!({"a": 2}));
    }

    #[test]
    fn a_namespace_in_the_name_and_a_different_flag_are_refused() {
        assert_eq!(split_name("ns/a", None).unwrap(), ("ns".into(), "a".into()));
        assert_eq!(
            split_name("ns/a", Some("ns")).unwrap(),
            ("ns".into(), "a".into())
        );
        assert_eq!(
            split_name("a", Some("x")).unwrap(),
            ("x".into(), "a".into())
        );
        assert_eq!(
            split_name("a", None).unwrap(),
            ("default".into(), "a".into())
        );
        assert!(matches!(
            split_name("ns/a", Some("other")),
            Err(CliError::Usage(_))
        ));
    }

    #[test]
    fn decode_errors_name_the_field_not_the_value() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct P {
            replicas: u32,
        }
        let e = decode::<P>("profile", serde_json::json!({"replicas": "s3cret"})).unwrap_err();
        let CliError::Usage(m) = e else {
            panic!("{e:?}")
        };
        assert!(m.contains("replicas") && !m.contains("s3cret"), "{m}");
    }
}
