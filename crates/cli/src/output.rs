//! Printing results as aligned tables, JSON or YAML, and errors as one line.

use std::io::Write;

use serde::Serialize;

use crate::args::Output;

/// A result that can be printed: its API form (for JSON/YAML) and a table.
pub struct Printable {
    /// The API's object.
    pub value: serde_json::Value,
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
            headers,
            rows,
        }
    }
}

/// Formats rows as columns separated by three spaces, each as wide as its widest cell.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}   ", width = widths[i]));
            }
        }
        out.trim_end().to_string()
    };
    let mut out = line(headers.to_vec());
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

/// Prints `p` in the chosen format.
pub fn print(p: &Printable, format: Output) {
    let text = match format {
        Output::Table => table(&p.headers, &p.rows),
        Output::Json => format!(
            "{}\n",
            serde_json::to_string_pretty(&p.value).unwrap_or_default()
        ),
        Output::Yaml => serde_yaml::to_string(&p.value).unwrap_or_default(),
    };
    let _ = std::io::stdout().write_all(text.as_bytes());
}

/// A byte count for people: `1.5 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let t = table(
            &["NAME", "PHASE"],
            &[
                vec!["a".into(), "Ready".into()],
                vec!["longer-name".into(), "Failed".into()],
            ],
        );
        assert_eq!(
            t,
            "NAME          PHASE\na             Ready\nlonger-name   Failed\n"
        );
        assert_eq!(human_bytes(1536 << 20), "1.5 GiB");
        assert_eq!(human_bytes(12), "12 B");
    }
}
