//! `--watch`: print what changed, until Ctrl-C (exit 0) or until the reader goes away (`| head`,
//! exit 0).
//!
//! Where the service streams changes (a namespace's volumes, the orchestrators), the list is read
//! again only when the server's watch says something changed: opening the watch sends every
//! current object as ADDED, so nothing that changed between a read and the watch's start is missed,
//! and a watch the server ends (its `timeoutSeconds`) is opened again. Where it does not (volumes
//! of every namespace, which have no one sequence of versions), or when the watch cannot be
//! opened, it looks again every second. What it prints is kubectl's
//! `--output-watch-events`: every change is an event, `ADDED`, `MODIFIED` or `DELETED`, with the
//! object; the first listing is all `ADDED`. A table gets an EVENT column (a deletion would otherwise
//! be indistinguishable from the object's last state); JSON is one `{"type", "object"}` per line;
//! YAML one such document each.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use client::ClientError;
use domain::Code;

use super::CliError;
use crate::args::{Output, Shape};
use crate::output::{Columns, Tabular, write_stdout};

/// How often a watch looks again.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// One look at the watched thing.
pub type Fetch<'a, T> =
    Box<dyn FnMut() -> Pin<Box<dyn Future<Output = Result<T, ClientError>> + 'a>> + 'a>;

/// Opens the server's watch of what a [`Source`] reads.
pub type Changes<'a> = Box<
    dyn FnMut() -> Pin<Box<dyn Future<Output = Result<client::watch::Watch, ClientError>> + 'a>>
        + 'a,
>;

/// How long each server watch the CLI opens lasts before it is opened again.
pub const STREAM_SECONDS: u64 = 300;

/// The server's watch a `--watch` follows, opened again whenever it ends.
struct Following<'a> {
    opener: Option<Changes<'a>>,
    open: Option<client::watch::Watch>,
    /// The watch could not be opened: said once, and looked again every second meanwhile.
    failing: bool,
}

impl Following<'_> {
    /// Waits until the server's watch says something changed (or, without one, for
    /// [`INTERVAL`]). A watch that ended is opened again; while one cannot be opened (the server
    /// restarting), it looks every second and tries again each time, so it goes back to
    /// following the server once it can.
    async fn changed(&mut self) {
        let Some(opener) = &mut self.opener else {
            tokio::time::sleep(INTERVAL).await;
            return;
        };
        loop {
            let stream = match &mut self.open {
                Some(stream) => stream,
                None => match opener().await {
                    Ok(stream) => {
                        if std::mem::take(&mut self.failing) {
                            eprintln!("watch: following the server's changes again");
                        }
                        self.open.insert(stream)
                    }
                    Err(e) => {
                        if !std::mem::replace(&mut self.failing, true) {
                            eprintln!(
                                "watch: {}; looking every second until the server's watch opens again",
                                e.status.message
                            );
                        }
                        tokio::time::sleep(INTERVAL).await;
                        return;
                    }
                },
            };
            match stream.next().await {
                Ok(Some(event)) if event.event == "BOOKMARK" => {}
                // A change, or a watch the server ended or outran (an ERROR event): read the list
                // again; an ended one is opened again after (which sends every object again, so
                // nothing between is missed).
                Ok(Some(event)) => {
                    if event.event == "ERROR" {
                        self.open = None;
                    }
                    return;
                }
                Ok(None) | Err(_) => {
                    self.open = None;
                    return;
                }
            }
        }
    }
}

/// What a watch looks at.
pub enum Source<'a, T> {
    /// One object; NotFound after it was seen is its deletion.
    One(Fetch<'a, T>),
    /// A list of objects.
    Many(Fetch<'a, Vec<T>>),
}

impl<T> Source<'_, T> {
    async fn fetch(&mut self, seen_before: bool) -> Result<Vec<T>, ClientError> {
        match self {
            Source::Many(f) => f().await,
            Source::One(f) => match f().await {
                Ok(one) => Ok(vec![one]),
                Err(e) if seen_before && e.code() == Code::NotFound => Ok(Vec::new()),
                Err(e) => Err(e),
            },
        }
    }
}

/// A change to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Added,
    Modified,
    Deleted,
}

impl Event {
    fn as_str(self) -> &'static str {
        match self {
            Event::Added => "ADDED",
            Event::Modified => "MODIFIED",
            Event::Deleted => "DELETED",
        }
    }
}

/// Prints the changes `source` shows until interrupted.
pub async fn watch<T: Tabular + Clone>(
    mut source: Source<'_, T>,
    server_watch: Option<Changes<'_>>,
    output: Output,
) -> Result<(), CliError> {
    let mut following = Following {
        opener: server_watch,
        open: None,
        failing: false,
    };
    let wide = output.is_wide();
    let mut headers = vec!["EVENT"];
    headers.extend(T::headers(wide));
    let mut columns = Columns::default();
    columns.fit(&headers);
    // Every event's name fits its column from the first line, so a later MODIFIED or DELETED row
    // does not push its row out of line with the ones above it.
    let mut widest_event = vec![""; headers.len()];
    widest_event[0] = "MODIFIED";
    columns.fit(&widest_event);
    let mut known: BTreeMap<String, (serde_json::Value, T)> = BTreeMap::new();
    let mut first = true;
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let fetched = tokio::select! {
            _ = &mut interrupted => return Ok(()),
            fetched = source.fetch(!first) => fetched,
        };
        match fetched {
            Ok(items) => {
                let events = changes(&mut known, items);
                let text = render(&events, &headers, &mut columns, first, output, wide);
                if write_stdout(&text).is_err() {
                    // The reader went away: nothing more to do for it.
                    return Ok(());
                }
                first = false;
            }
            // The first look decides whether there is anything to watch at all.
            Err(e) if first => return Err(e.into()),
            // Later, a server that is busy or briefly away does not end the watch.
            Err(e) if matches!(e.http_status, Some(429 | 503) | None) => {
                eprintln!("watch: {}; looking again", e.status.message);
            }
            Err(e) => return Err(e.into()),
        }
        tokio::select! {
            _ = &mut interrupted => return Ok(()),
            () = following.changed() => {}
        }
    }
}

/// What changed between `known` and `items`, and `known` brought up to date.
fn changes<T: Tabular + Clone>(
    known: &mut BTreeMap<String, (serde_json::Value, T)>,
    items: Vec<T>,
) -> Vec<(Event, T)> {
    let mut now = BTreeMap::new();
    let mut events = Vec::new();
    for item in items {
        let value = serde_json::to_value(&item).unwrap_or_default();
        let key = item.key();
        match known.get(&key) {
            None => events.push((Event::Added, item.clone())),
            Some((before, _)) if *before != value => events.push((Event::Modified, item.clone())),
            Some(_) => {}
        }
        now.insert(key, (value, item));
    }
    for (key, (_, item)) in known.iter() {
        if !now.contains_key(key) {
            events.push((Event::Deleted, item.clone()));
        }
    }
    *known = now;
    events
}

fn render<T: Tabular>(
    events: &[(Event, T)],
    headers: &[&str],
    columns: &mut Columns,
    first: bool,
    output: Output,
    wide: bool,
) -> String {
    let mut out = String::new();
    match output.shape {
        Shape::Table | Shape::Wide => {
            let rows: Vec<Vec<String>> = events
                .iter()
                .map(|(event, item)| {
                    let mut row = vec![event.as_str().to_string()];
                    row.extend(item.row(wide));
                    row
                })
                .collect();
            for row in &rows {
                columns.fit(row);
                // The first rows leave room for a little more (a phase that grows from Ready to
                // Deleting), as `get --watch` does.
                if first {
                    let roomy: Vec<String> = row.iter().map(|c| format!("{c}    ")).collect();
                    columns.fit(&roomy);
                }
            }
            if first && output.headers {
                out.push_str(&columns.line(headers));
                out.push('\n');
            }
            for row in &rows {
                out.push_str(&columns.line(row));
                out.push('\n');
            }
        }
        Shape::Name => {
            for (_, item) in events {
                out.push_str(&item.name());
                out.push('\n');
            }
        }
        Shape::JsonPath(template) => {
            // Checked when the command line was parsed; applied to each changed object.
            if let Ok(template) = crate::jsonpath::Template::parse(template) {
                for (_, item) in events {
                    out.push_str(&template.render(&serde_json::to_value(item).unwrap_or_default()));
                }
            }
        }
        Shape::Json | Shape::Yaml => {
            for (event, item) in events {
                let value = serde_json::json!({"type": event.as_str(), "object": item});
                if output.shape == Shape::Json {
                    out.push_str(&value.to_string());
                    out.push('\n');
                } else {
                    out.push_str("---\n");
                    out.push_str(&serde_yaml::to_string(&value).unwrap_or_default());
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, serde::Serialize)]
    struct Thing {
        name: &'static str,
        state: &'static str,
    }

    impl Tabular for Thing {
        fn headers(_: bool) -> Vec<&'static str> {
            vec!["NAME", "STATE"]
        }
        fn row(&self, _: bool) -> Vec<String> {
            vec![self.name.into(), self.state.into()]
        }
        fn key(&self) -> String {
            self.name.into()
        }
        fn name(&self) -> String {
            format!("thing/{}", self.name)
        }
    }

    #[test]
    fn changes_are_added_modified_and_deleted() {
        let mut known = BTreeMap::new();
        let t = |name, state| Thing { name, state };
        let events = changes(&mut known, vec![t("a", "Pending"), t("b", "Ready")]);
        assert_eq!(
            events.iter().map(|(e, _)| *e).collect::<Vec<_>>(),
            [Event::Added, Event::Added]
        );
        let events = changes(&mut known, vec![t("a", "Ready"), t("b", "Ready")]);
        assert_eq!(events.len(), 1);
        assert_eq!((events[0].0, events[0].1.state), (Event::Modified, "Ready"));
        let events = changes(&mut known, vec![t("a", "Ready")]);
        assert_eq!((events[0].0, events[0].1.name), (Event::Deleted, "b"));
        assert!(changes(&mut known, vec![t("a", "Ready")]).is_empty());

        let mut columns = Columns::default();
        let headers = ["EVENT", "NAME", "STATE"];
        columns.fit(&headers);
        let text = render(
            &[(Event::Deleted, t("b", "Ready"))],
            &headers,
            &mut columns,
            true,
            Output::TABLE,
            false,
        );
        // The first rows leave room: a later, longer cell keeps its row in line.
        assert_eq!(
            text,
            "EVENT         NAME    STATE\nDELETED       b       Ready\n"
        );
        let later = render(
            &[(Event::Modified, t("b", "Deleting"))],
            &headers,
            &mut columns,
            false,
            Output::TABLE,
            false,
        );
        assert_eq!(later, "MODIFIED      b       Deleting\n");
        let json = render(
            &[(Event::Added, t("a", "Ready"))],
            &headers,
            &mut columns,
            false,
            Output {
                shape: Shape::Json,
                headers: true,
            },
            false,
        );
        assert_eq!(
            json,
            "{\"object\":{\"name\":\"a\",\"state\":\"Ready\"},\"type\":\"ADDED\"}\n"
        );
    }
}
