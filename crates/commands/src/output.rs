//! Printing results as aligned tables, JSON or YAML; sizes and ages for people.
//!
//! Everything goes through [`write_stdout`], which reports a closed pipe (`berth … | head -1`) as an
//! error the caller can stop on instead of a panic. Nothing here colours its output.

use std::io::Write;

use serde::Serialize;

use crate::args::{Output, Shape};

/// A result that can be printed: its API form (for JSON/YAML) and a table.
pub struct Printable {
    /// The API's object.
    pub value: serde_json::Value,
    /// `kind/name` of each object, for `-o name`; empty where the result is not objects (then
    /// `-o name` prints each row's first cell).
    pub names: Vec<String>,
    /// Column headers.
    pub headers: Vec<&'static str>,
    /// Rows of cells.
    pub rows: Vec<Vec<String>>,
}

impl Printable {
    /// A printable of `value` with this table.
    pub fn new(value: &impl Serialize, headers: Vec<&'static str>, rows: Vec<Vec<String>>) -> Self {
        Printable {
            value: serde_json::to_value(value).unwrap_or_default(),
            names: Vec::new(),
            headers,
            rows,
        }
    }

    /// A printable of API objects that know their own table (`wide` for more columns).
    pub fn of<T: Tabular>(value: &impl Serialize, items: &[T], wide: bool) -> Self {
        let mut printable = Printable::new(
            value,
            T::headers(wide),
            items.iter().map(|i| i.row(wide)).collect(),
        );
        printable.names = items.iter().map(Tabular::name).collect();
        printable
    }
}

/// An API object with a table form.
pub trait Tabular: Serialize {
    /// The column headers (`wide` adds columns).
    fn headers(wide: bool) -> Vec<&'static str>;
    /// This object's cells, in header order.
    fn row(&self, wide: bool) -> Vec<String>;
    /// What identifies the object across two readings (for `--watch`).
    fn key(&self) -> String;
    /// `kind/name`, as `-o name` prints it.
    fn name(&self) -> String;
}

impl Tabular for domain::Volume {
    fn headers(wide: bool) -> Vec<&'static str> {
        let mut h = vec![
            "NAMESPACE",
            "NAME",
            "CAPACITY",
            "ORCHESTRATOR",
            "PHASE",
            "AGE",
        ];
        if wide {
            h.extend(["REPLICAS", "LOCATION", "LABELS"]);
        }
        h
    }

    fn row(&self, wide: bool) -> Vec<String> {
        let mut r = vec![
            self.metadata.namespace.clone(),
            self.metadata.name.clone(),
            quantity(self.spec.capacity_bytes),
            self.spec.orchestrator.clone(),
            self.status.phase.to_string(),
            age(&self.metadata.creation_timestamp),
        ];
        if wide {
            r.extend([
                self.spec.replicas.to_string(),
                or_none(&self.status.location),
                labels(self.metadata.labels.iter()),
            ]);
        }
        r
    }

    fn key(&self) -> String {
        format!("{}/{}", self.metadata.namespace, self.metadata.name)
    }

    fn name(&self) -> String {
        format!("volume/{}", self.metadata.name)
    }
}

impl Tabular for domain::Orchestrator {
    fn headers(wide: bool) -> Vec<&'static str> {
        let mut h = vec!["NAME", "KIND", "DEFAULT", "STORAGE-OPS", "REGION", "LABEL"];
        if wide {
            h.push("CONFIG");
        }
        h
    }

    fn row(&self, wide: bool) -> Vec<String> {
        let mut r = vec![
            self.name.clone(),
            self.kind.to_string(),
            self.default.to_string(),
            self.storage_ops.to_string(),
            or_none(&self.region),
            or_none(&self.label),
        ];
        if wide {
            let config = match &self.config {
                serde_json::Value::Object(map) if !map.is_empty() => map
                    .iter()
                    .map(|(k, v)| match v {
                        serde_json::Value::String(s) => format!("{k}={s}"),
                        other => format!("{k}={other}"),
                    })
                    .collect::<Vec<_>>()
                    .join(","),
                _ => "<none>".into(),
            };
            r.push(config);
        }
        r
    }

    fn key(&self) -> String {
        self.name.clone()
    }

    fn name(&self) -> String {
        format!("orchestrator/{}", self.name)
    }
}

fn or_none(s: &str) -> String {
    if s.is_empty() {
        "<none>".into()
    } else {
        s.to_string()
    }
}

/// Labels as `kubectl get --show-labels` prints them: `a=1,b=2`, or `<none>`.
pub fn labels<'a>(pairs: impl Iterator<Item = (&'a String, &'a String)>) -> String {
    let joined: Vec<String> = pairs.map(|(k, v)| format!("{k}={v}")).collect();
    if joined.is_empty() {
        "<none>".into()
    } else {
        joined.join(",")
    }
}

/// Column widths that only grow, so rows printed over time (`--watch`) stay aligned as far as they can.
#[derive(Debug, Default)]
pub struct Columns {
    widths: Vec<usize>,
}

impl Columns {
    /// Widens the columns to fit `cells`.
    pub fn fit(&mut self, cells: &[impl AsRef<str>]) {
        if self.widths.len() < cells.len() {
            self.widths.resize(cells.len(), 0);
        }
        for (w, c) in self.widths.iter_mut().zip(cells) {
            *w = (*w).max(c.as_ref().chars().count());
        }
    }

    /// One line: cells padded to their column and separated by three spaces, without trailing blanks.
    pub fn line(&self, cells: &[impl AsRef<str>]) -> String {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let cell = cell.as_ref();
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                let width = self.widths.get(i).copied().unwrap_or(0);
                out.push_str(&format!("{cell:<width$}   "));
            }
        }
        out.trim_end().to_string()
    }
}

/// Formats rows as columns separated by three spaces, each as wide as its widest cell; the header
/// line first unless `headers` is false (`--no-headers`), the columns as wide either way.
pub fn table(headers: &[&str], rows: &[Vec<String>], with_headers: bool) -> String {
    let mut columns = Columns::default();
    columns.fit(headers);
    for row in rows {
        columns.fit(row);
    }
    let mut out = String::new();
    if with_headers {
        out.push_str(&columns.line(headers));
        out.push('\n');
    }
    for row in rows {
        out.push_str(&columns.line(row));
        out.push('\n');
    }
    out
}

/// Writes `text` to stdout. A closed pipe comes back as an error (`BrokenPipe`), never a panic.
pub fn write_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// `p` in the chosen format.
pub fn render(p: &Printable, format: Output) -> String {
    match format.shape {
        Shape::Table | Shape::Wide => table(&p.headers, &p.rows, format.headers),
        Shape::Json => format!(
            "{}\n",
            serde_json::to_string_pretty(&p.value).unwrap_or_default()
        ),
        Shape::Yaml => serde_yaml::to_string(&p.value).unwrap_or_default(),
        Shape::Name => {
            let names: Vec<&str> = if p.names.is_empty() {
                p.rows
                    .iter()
                    .filter_map(|row| row.first().map(String::as_str))
                    .collect()
            } else {
                p.names.iter().map(String::as_str).collect()
            };
            names.iter().map(|n| format!("{n}\n")).collect()
        }
        // Checked when the command line was parsed.
        Shape::JsonPath(template) => crate::jsonpath::Template::parse(template)
            .map(|t| t.render(&p.value))
            .unwrap_or_else(|e| format!("{e}\n")),
    }
}

/// Prints `p` in the chosen format. A reader that went away (`| head`) is not an error. While
/// [`gather`] gathers, `p`'s value is kept instead, to be printed with the others as one.
pub fn print(p: &Printable, format: Output) {
    if let Some(gathered) = GATHERED.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        gathered.push(p.value.clone());
        return;
    }
    let _ = write_stdout(&render(p, format));
}

/// What [`print`] keeps while gathering.
static GATHERED: std::sync::Mutex<Option<Vec<serde_json::Value>>> = std::sync::Mutex::new(None);

/// Runs the commands `run` runs, keeping what they print, then prints it as one `List` in
/// `format` (the items of each list, and each single object), as kubectl prints `get md,ms -o
/// json`: one document a reader (or `berth apply -f -`) takes whole. Gives `run`'s outcome.
pub async fn gather<T>(format: Output, run: impl Future<Output = T>) -> T {
    *GATHERED.lock().unwrap_or_else(|e| e.into_inner()) = Some(Vec::new());
    let outcome = run.await;
    let gathered = GATHERED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .unwrap_or_default();
    let mut items = Vec::new();
    for value in gathered {
        match value.get("items").and_then(serde_json::Value::as_array) {
            Some(listed) => items.extend(listed.iter().cloned()),
            None => items.push(value),
        }
    }
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    let _ = write_stdout(&render(
        &Printable::new(&list, Vec::new(), Vec::new()),
        format,
    ));
    outcome
}

/// Prints a list; an empty one, in a table format, is one line on stderr (`No volumes found in
/// namespace default.`), as kubectl does, so stdout stays empty for scripts.
pub fn print_list(p: &Printable, format: Output, empty: &str) {
    if p.rows.is_empty() && format.is_table() {
        eprintln!("{empty}");
    } else {
        print(p, format);
    }
}

/// A byte count in Kubernetes quantity notation, the way capacities are written (`--capacity 10Gi`):
/// exact in the largest binary (`1536Mi`) or else decimal (`500M`) unit that divides it; otherwise
/// rounded to one decimal in the largest binary unit it reaches (`11.8Mi`).
pub fn quantity(bytes: u64) -> String {
    const BINARY: [(&str, u32); 6] = [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ];
    const DECIMAL: [(&str, u64); 6] = [
        ("E", 1_000_000_000_000_000_000),
        ("P", 1_000_000_000_000_000),
        ("T", 1_000_000_000_000),
        ("G", 1_000_000_000),
        ("M", 1_000_000),
        ("k", 1_000),
    ];
    if bytes == 0 {
        return "0".into();
    }
    for (suffix, shift) in BINARY {
        let unit = 1u64 << shift;
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    for (suffix, unit) in DECIMAL {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    for (suffix, shift) in BINARY {
        let unit = 1u64 << shift;
        if bytes >= unit {
            return format!("{:.1}{suffix}", bytes as f64 / unit as f64);
        }
    }
    bytes.to_string()
}

/// How long ago an RFC 3339 timestamp was, as kubectl's AGE column says it.
pub fn age(timestamp: &str) -> String {
    match chrono::DateTime::parse_from_rfc3339(timestamp) {
        Ok(t) => human_duration(chrono::Utc::now().signed_duration_since(t)),
        Err(_) => "<unknown>".into(),
    }
}

/// kubectl's `HumanDuration`: two significant units while they matter (`5m30s`, `3h20m`), one after.
pub fn human_duration(d: chrono::TimeDelta) -> String {
    let seconds = d.num_seconds();
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{days}d")
        } else {
            format!("{days}d{h}h")
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if hours < 24 * 365 * 8 {
        let d = days % 365;
        return if d == 0 {
            format!("{years}y")
        } else {
            format!("{years}y{d}d")
        };
    }
    format!("{years}y")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let rows = [
            vec!["a".into(), "Ready".into()],
            vec!["longer-name".into(), "Failed".into()],
        ];
        let t = table(&["NAME", "PHASE"], &rows, true);
        assert_eq!(
            t,
            "NAME          PHASE\na             Ready\nlonger-name   Failed\n"
        );
        let t = table(&["NAME", "PHASE"], &rows, false);
        assert_eq!(t, "a             Ready\nlonger-name   Failed\n");
    }

    #[test]
    fn sizes_are_written_as_quantities_people_type() {
        assert_eq!(quantity(1536 << 20), "1536Mi");
        assert_eq!(quantity(64 << 20), "64Mi");
        assert_eq!(quantity(1 << 30), "1Gi");
        assert_eq!(quantity(500_000_000), "500M");
        assert_eq!(quantity(12), "12");
        assert_eq!(quantity(0), "0");
        assert_eq!(quantity(12_345_678), "11.8Mi");
        assert_eq!(quantity(1536), "1.5Ki");
    }

    #[test]
    fn ages_read_like_kubectl() {
        let s = chrono::TimeDelta::seconds;
        assert_eq!(human_duration(s(5)), "5s");
        assert_eq!(human_duration(s(119)), "119s");
        assert_eq!(human_duration(s(330)), "5m30s");
        assert_eq!(human_duration(s(600)), "10m");
        assert_eq!(human_duration(s(3 * 3600 + 20 * 60)), "3h20m");
        assert_eq!(human_duration(s(30 * 3600)), "30h");
        assert_eq!(human_duration(s(3 * 86400 + 3600)), "3d1h");
        assert_eq!(human_duration(s(100 * 86400)), "100d");
        assert_eq!(human_duration(s(-5)), "<invalid>");
        assert_eq!(age("not a time"), "<unknown>");
        let now = chrono::Utc::now() - chrono::TimeDelta::seconds(42);
        assert_eq!(
            age(&now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
            "42s"
        );
    }
}
