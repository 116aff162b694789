//! How the machine controller's objects print: each kind's table columns and an object's cells,
//! for a list and for the events of a watch. Apart because it is the one place that knows which
//! fields of each kind matter to a person; the verbs only fetch.

use domain::resources::Kind;
use serde_json::{Value, json};

use super::{lower, number, text};
use crate::args::{Output, Shape};
use crate::output::{Columns, Printable, age, labels, write_stdout};

/// A kind's table: headers, and the cells of one object.
fn headers(kind: Kind, wide: bool) -> Vec<&'static str> {
    let mut h = match kind {
        Kind::Machine => vec!["NAME", "PHASE", "PROVIDER ID", "NODE", "AGE"],
        Kind::MachineSet => vec!["NAME", "DESIRED", "CURRENT", "READY", "AGE"],
        Kind::MachineDeployment => vec!["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        Kind::MachineClass => vec!["NAME", "PROVIDER", "SECRET", "AGE"],
        Kind::Secret => vec!["NAME", "TYPE", "KEYS", "AGE"],
    };
    if wide {
        h.extend(match kind {
            Kind::Machine => vec!["CLASS", "ADDRESSES", "LAST OPERATION", "LABELS"],
            Kind::MachineSet | Kind::MachineDeployment => vec!["CLASS", "SELECTOR", "LABELS"],
            Kind::MachineClass | Kind::Secret => vec!["LABELS"],
        });
    }
    h
}

fn row(kind: Kind, o: &Value, wide: bool) -> Vec<String> {
    let name = text(o, "/metadata/name").to_string();
    let created = age(text(o, "/metadata/creationTimestamp"));
    let mut r = match kind {
        Kind::Machine => {
            let phase = if o.pointer("/metadata/deletionTimestamp").is_some() {
                "Terminating"
            } else {
                text(o, "/status/phase")
            };
            vec![
                name,
                or_dash(phase),
                or_dash(text(o, "/status/providerID")),
                or_dash(text(o, "/status/nodeName")),
                created,
            ]
        }
        Kind::MachineSet => vec![
            name,
            number(o, "/spec/replicas").to_string(),
            number(o, "/status/replicas").to_string(),
            number(o, "/status/readyReplicas").to_string(),
            created,
        ],
        Kind::MachineDeployment => vec![
            name,
            format!(
                "{}/{}",
                number(o, "/status/readyReplicas"),
                number(o, "/spec/replicas")
            ),
            number(o, "/status/updatedReplicas").to_string(),
            number(o, "/status/availableReplicas").to_string(),
            created,
        ],
        Kind::MachineClass => vec![
            name,
            text(o, "/provider").to_string(),
            or_dash(text(o, "/secretRef/name")),
            created,
        ],
        Kind::Secret => {
            let keys: Vec<&str> = o["keys"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let kind = match text(o, "/type") {
                "" => "Opaque",
                t => t,
            };
            vec![name, kind.to_string(), keys.join(","), created]
        }
    };
    if wide {
        let map: std::collections::BTreeMap<String, String> =
            serde_json::from_value(o["metadata"]["labels"].clone()).unwrap_or_default();
        let object_labels = labels(map.iter());
        match kind {
            Kind::Machine => {
                let addresses: Vec<&str> = o["status"]["addresses"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|a| a["address"].as_str())
                    .collect();
                let last = match o.pointer("/status/lastOperation") {
                    Some(op) => format!("{} {}", text(op, "/type"), text(op, "/state")),
                    None => "-".into(),
                };
                r.extend([
                    or_dash(text(o, "/spec/class/name")),
                    or_dash(&addresses.join(",")),
                    last,
                    object_labels,
                ]);
            }
            Kind::MachineSet | Kind::MachineDeployment => {
                let selector = o["spec"]["selector"]["matchLabels"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .unwrap_or_default();
                r.extend([
                    or_dash(text(o, "/spec/template/spec/class/name")),
                    or_dash(&selector),
                    object_labels,
                ]);
            }
            Kind::MachineClass | Kind::Secret => r.push(object_labels),
        }
    }
    r
}

fn or_dash(text: &str) -> String {
    if text.is_empty() {
        "-".into()
    } else {
        text.to_string()
    }
}

pub(super) fn printable(kind: Kind, value: Value, items: &[Value], wide: bool) -> Printable {
    let mut p = Printable::new(
        &value,
        headers(kind, wide),
        items.iter().map(|o| row(kind, o, wide)).collect(),
    );
    p.names = items
        .iter()
        .map(|o| format!("{}/{}", lower(kind), text(o, "/metadata/name")))
        .collect();
    p
}

/// Prints watch events in the chosen form, columns sized once from the headers and the first rows
/// so later rows stay aligned.
pub(super) struct EventPrinter {
    kind: Kind,
    output: Output,
    columns: Option<Columns>,
}

impl EventPrinter {
    pub(super) fn new(kind: Kind, output: Output) -> Self {
        EventPrinter {
            kind,
            output,
            columns: None,
        }
    }

    /// Prints one event; false once the reader went away.
    pub(super) fn print(&mut self, event: &str, object: &Value) -> bool {
        let wide = self.output.is_wide();
        let mut out = String::new();
        match self.output.shape {
            Shape::Table | Shape::Wide => {
                let mut cells = vec![event.to_string()];
                cells.extend(row(self.kind, object, wide));
                if self.columns.is_none() {
                    let mut header = vec!["EVENT"];
                    header.extend(headers(self.kind, wide));
                    let mut columns = Columns::default();
                    columns.fit(&header);
                    // Room for what the first rows hold and a little more.
                    let roomy: Vec<String> = cells.iter().map(|c| format!("{c}    ")).collect();
                    columns.fit(&roomy);
                    if self.output.headers {
                        out.push_str(&columns.line(&header));
                        out.push('\n');
                    }
                    self.columns = Some(columns);
                }
                if let Some(columns) = &self.columns {
                    out.push_str(&columns.line(&cells));
                    out.push('\n');
                }
            }
            Shape::Name => out.push_str(&format!(
                "{}/{}\n",
                lower(self.kind),
                text(object, "/metadata/name")
            )),
            Shape::JsonPath(template) => {
                if let Ok(template) = crate::jsonpath::Template::parse(template) {
                    out.push_str(&template.render(object));
                }
            }
            Shape::Json => {
                out.push_str(&json!({"type": event, "object": object}).to_string());
                out.push('\n');
            }
            Shape::Yaml => {
                out.push_str("---\n");
                out.push_str(
                    &serde_yaml::to_string(&json!({"type": event, "object": object}))
                        .unwrap_or_default(),
                );
            }
        }
        write_stdout(&out).is_ok()
    }
}
