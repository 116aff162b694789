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
        let value = <serde_json::Value as serde::Deserialize>::deserialize(doc)
            .map_err(|e| CliError::Usage(format!("{source}: not YAML or JSON: {e}")))?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
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
