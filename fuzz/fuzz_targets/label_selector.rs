//! Label selectors (`domain::selector`): any text parses or is refused with a message that starts
//! `query parameter labelSelector: ` and says the rule, never a panic. A parsed selector prints in a
//! form that parses back to the same requirements and is a fixed point; matching any label set never
//! panics and agrees with the requirements' meaning in Kubernetes, evaluated here independently (and
//! the empty selector matches everything).
#![no_main]

use domain::selector::Requirement;
use domain::{Code, Labels, Selector};
use libfuzzer_sys::fuzz_target;

/// The input: the selector on the first line, then one `key=value` label a line; a key or value
/// written `@N` is the Nth key or value the selector mentions, so that matching is exercised on both
/// outcomes rather than on absent keys only.
struct Input<'a> {
    selector: &'a str,
    labels: Vec<(&'a str, &'a str)>,
}

fn input(text: &str) -> Input<'_> {
    let mut lines = text.split('\n');
    let selector = lines.next().unwrap_or_default();
    let labels = lines
        .map(|l| l.split_once('=').unwrap_or((l, "")))
        .collect();
    Input { selector, labels }
}

/// Every key and value the selector mentions.
fn mentioned(s: &Selector) -> Vec<String> {
    let mut out = Vec::new();
    for r in s.requirements() {
        match r {
            Requirement::Equals(k, v) | Requirement::NotEquals(k, v) => {
                out.push(k.clone());
                out.push(v.clone());
            }
            Requirement::In(k, vs) | Requirement::NotIn(k, vs) => {
                out.push(k.clone());
                out.extend(vs.iter().cloned());
            }
            Requirement::Exists(k) | Requirement::DoesNotExist(k) => out.push(k.clone()),
        }
    }
    out
}

fn holds(r: &Requirement, labels: &Labels) -> bool {
    match r {
        Requirement::Equals(k, v) => labels.get(k).map(String::as_str) == Some(v.as_str()),
        Requirement::NotEquals(k, v) => labels.get(k).map(String::as_str) != Some(v.as_str()),
        Requirement::In(k, vs) => match labels.get(k) {
            Some(v) => vs.contains(v),
            None => false,
        },
        Requirement::NotIn(k, vs) => match labels.get(k) {
            Some(v) => !vs.contains(v),
            None => true,
        },
        Requirement::Exists(k) => labels.contains_key(k),
        Requirement::DoesNotExist(k) => !labels.contains_key(k),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let input = input(text);
    let selector = match input.selector.parse::<Selector>() {
        Ok(s) => s,
        Err(e) => {
            assert_eq!(e.code, Code::InvalidArgument);
            assert!(
                e.message.starts_with("query parameter labelSelector: "),
                "{}",
                e.message
            );
            return;
        }
    };
    let printed = selector.to_string();
    let again: Selector = printed
        .parse()
        .unwrap_or_else(|e| panic!("{:?} printed as {printed:?}, refused: {e}", input.selector));
    assert_eq!(
        again, selector,
        "{:?} printed as {printed:?}",
        input.selector
    );
    assert_eq!(again.to_string(), printed, "printing is a fixed point");
    assert_eq!(selector.is_empty(), selector.requirements().is_empty());

    let words = mentioned(&selector);
    let pick = |p: &str| match p.strip_prefix('@').and_then(|n| n.parse::<usize>().ok()) {
        Some(i) if !words.is_empty() => words[i % words.len()].clone(),
        _ => p.to_string(),
    };
    let labels: Labels = input
        .labels
        .iter()
        .map(|(k, v)| (pick(k), pick(v)))
        .collect();
    let matched = selector.matches(&labels);
    let expected = selector.requirements().iter().all(|r| holds(r, &labels));
    assert_eq!(matched, expected, "{printed:?} on {labels:?}");
    if selector.is_empty() {
        assert!(matched, "the empty selector matches everything");
    }
    // A selector is the conjunction of its requirements: its printed form, cut at the commas
    // outside parentheses, is one selector per requirement, in order.
    let mut parts = Vec::new();
    let (mut depth, mut from) = (0, 0);
    for (i, c) in printed.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&printed[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    if !printed.is_empty() {
        parts.push(&printed[from..]);
    }
    assert_eq!(parts.len(), selector.requirements().len(), "{printed:?}");
    for (part, r) in parts.iter().zip(selector.requirements()) {
        let one: Selector = part.parse().expect("one requirement parses");
        assert_eq!(one.requirements(), std::slice::from_ref(r), "{part:?}");
        assert_eq!(one.matches(&labels), holds(r, &labels));
    }
});
