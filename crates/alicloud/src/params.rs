//! Action parameters and the SDK's flattening rules (`openapiutil.Query`).
//!
//! Lists become 1-based `Name.N[.Field]`, structs become `Name.Field`, and a few list parameters
//! (`InstanceIds`, `DiskIds`) are JSON-array strings instead.
//!
//! This module knows no ECS type: the requests of [`crate::model`] flatten themselves into
//! [`Params`] (tags included, `Params::set_tags` lives beside [`crate::model::Tag`]), so the
//! dependency runs one way, model to params.

use std::collections::BTreeMap;

/// The parameters of one action call, sorted by name (the order signing needs).
///
/// Empty strings are dropped: the Go provider sent them ("always passed as pointers"), which makes ECS
/// validate a present-but-empty value; leaving them out means "use the default".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params(BTreeMap<String, String>);

impl Params {
    /// No parameters.
    pub fn new() -> Self {
        Params::default()
    }

    /// Sets `name` to `value`, unless the value is empty.
    pub fn set(&mut self, name: impl Into<String>, value: impl ToString) -> &mut Self {
        let value = value.to_string();
        if !value.is_empty() {
            self.0.insert(name.into(), value);
        }
        self
    }

    /// Sets `name` when `value` is `Some`.
    pub fn set_opt<V: ToString>(&mut self, name: &str, value: Option<V>) -> &mut Self {
        if let Some(v) = value {
            self.set(name, v);
        }
        self
    }

    /// A list as a JSON-array string (`["a","b"]`), as `InstanceIds` and `DiskIds` want it.
    pub fn set_json_list(&mut self, name: &str, values: &[String]) -> &mut Self {
        if !values.is_empty() {
            let json = serde_json::to_string(values).expect("a list of strings serialises");
            self.0.insert(name.to_owned(), json);
        }
        self
    }

    /// A list as repeated `Name.N` parameters (1-based), as `NetworkInterfaceId.N` wants it.
    pub fn set_repeat_list(&mut self, name: &str, values: &[String]) -> &mut Self {
        for (i, v) in values.iter().enumerate() {
            self.set(format!("{name}.{}", i + 1), v);
        }
        self
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// The parameters, sorted by name.
    pub fn as_map(&self) -> &BTreeMap<String, String> {
        &self.0
    }

    /// Takes the parameters out.
    pub fn into_map(self) -> BTreeMap<String, String> {
        self.0
    }
}
