//! `-o jsonpath=TEMPLATE`: kubectl's JSONPath templates over the API's JSON.
//!
//! A template is text with `{…}` actions, as kubectl writes them: `{.items[*].metadata.name}`,
//! `{range .items[*]}{.metadata.name}{"\t"}{.status.phase}{"\n"}{end}`. Each expression is a JSONPath
//! relative to the current object (the whole answer, or the item a `range` is at); kubectl's forms map
//! onto RFC 9535 queries (`.a.b` is `$.a.b`, `@` inside a filter is the same), which
//! `serde_json_path` evaluates, so only the template's own grammar (text, quoted strings, `range`,
//! `end`) is parsed here. Several results are joined by a space, strings are printed bare and
//! anything else as JSON, as kubectl prints them.

use serde_json::Value;
use serde_json_path::JsonPath;

/// A parsed template.
#[derive(Debug)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug)]
enum Part {
    Text(String),
    Path(JsonPath),
    Range { over: JsonPath, body: Vec<Part> },
}

impl Template {
    /// Parses `template`, saying what is wrong and where.
    pub fn parse(template: &str) -> Result<Template, String> {
        let mut stack: Vec<(JsonPath, Vec<Part>)> = Vec::new();
        let mut parts = Vec::new();
        let mut rest = template;
        while !rest.is_empty() {
            let Some(open) = rest.find('{') else {
                parts.push(Part::Text(rest.to_string()));
                break;
            };
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_string()));
            }
            let action_and_rest = &rest[open + 1..];
            let close = closing_brace(action_and_rest)
                .ok_or_else(|| format!("jsonpath: `{{` at {open} is never closed"))?;
            let action = action_and_rest[..close].trim();
            rest = &action_and_rest[close + 1..];
            if let Some(over) = action.strip_prefix("range ") {
                stack.push((path(over)?, std::mem::take(&mut parts)));
            } else if action == "end" {
                let (over, outer) = stack
                    .pop()
                    .ok_or("jsonpath: `{end}` without a `{range …}` before it")?;
                let body = std::mem::replace(&mut parts, outer);
                parts.push(Part::Range { over, body });
            } else if let Some(text) = quoted(action) {
                parts.push(Part::Text(text?));
            } else {
                parts.push(Part::Path(path(action)?));
            }
        }
        if !stack.is_empty() {
            return Err("jsonpath: a `{range …}` has no `{end}`".to_string());
        }
        Ok(Template { parts })
    }

    /// The template applied to `value`.
    pub fn render(&self, value: &Value) -> String {
        let mut out = String::new();
        render(&self.parts, value, &mut out);
        out
    }
}

fn render(parts: &[Part], value: &Value, out: &mut String) {
    for part in parts {
        match part {
            Part::Text(text) => out.push_str(text),
            Part::Path(path) => {
                let found: Vec<String> = path.query(value).iter().map(|v| bare(v)).collect();
                out.push_str(&found.join(" "));
            }
            Part::Range { over, body } => {
                for item in over.query(value).iter() {
                    render(body, item, out);
                }
            }
        }
    }
}

/// A string without its quotes; any other value as JSON.
fn bare(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Where the `}` closing an action is, skipping braces and `}` inside quoted strings.
fn closing_brace(s: &str) -> Option<usize> {
    let mut quote = None;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (Some(_), _) if escaped => escaped = false,
            (Some(_), '\\') => escaped = true,
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '}') => return Some(i),
            (None, _) => {}
        }
    }
    None
}

/// A quoted string action (`{"\n"}`), unescaped as kubectl does; `None` when it is not one.
fn quoted(action: &str) -> Option<Result<String, String>> {
    let inner = action.strip_prefix('"')?.strip_suffix('"')?;
    Some(
        serde_json::from_str::<String>(&format!("\"{inner}\"")).map_err(|e| {
            format!("jsonpath: the string {action} is not a valid quoted string ({e})")
        }),
    )
}

/// kubectl's expression as an RFC 9535 query from the current object.
fn path(expression: &str) -> Result<JsonPath, String> {
    let expression = expression.trim();
    let query = match expression.chars().next() {
        Some('$') => expression.to_string(),
        Some('@') => format!("${}", &expression[1..]),
        Some('.' | '[') => format!("${expression}"),
        _ => format!("$.{expression}"),
    };
    JsonPath::parse(&query).map_err(|e| format!("jsonpath: {expression} is not a path ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list() -> Value {
        serde_json::json!({"items": [
            {"metadata": {"name": "a", "labels": {"app": "db"}}, "spec": {"capacityBytes": 1024}},
            {"metadata": {"name": "b", "labels": {}}, "spec": {"capacityBytes": 2048}},
        ]})
    }

    fn apply(template: &str, value: &Value) -> String {
        Template::parse(template).unwrap().render(value)
    }

    #[test]
    fn kubectl_templates_print_as_kubectl_prints_them() {
        assert_eq!(apply("{.items[*].metadata.name}", &list()), "a b");
        assert_eq!(apply("{.items[0].spec.capacityBytes}", &list()), "1024");
        assert_eq!(
            apply(
                "{range .items[*]}{.metadata.name}{\"\\t\"}{.spec.capacityBytes}{\"\\n\"}{end}",
                &list()
            ),
            "a\t1024\nb\t2048\n"
        );
        assert_eq!(
            apply(
                "names: {.items[?(@.metadata.labels.app==\"db\")].metadata.name}!",
                &list()
            ),
            "names: a!"
        );
        assert_eq!(apply("{.items[1].metadata.labels}", &list()), "{}");
        assert_eq!(apply("{.nothing}", &list()), "");
        assert_eq!(apply("{$.items[-1].metadata.name}", &list()), "b");
    }

    #[test]
    fn broken_templates_are_refused_with_the_reason() {
        for (template, says) in [
            ("{.items", "never closed"),
            ("{range .items[*]}{.a}", "no `{end}`"),
            ("{end}", "without a `{range"),
            ("{.items[}", "is not a path"),
            ("{\"\\q\"}", "not a valid quoted string"),
        ] {
            let e = Template::parse(template).unwrap_err();
            assert!(e.contains(says), "{template}: {e}");
        }
    }
}
