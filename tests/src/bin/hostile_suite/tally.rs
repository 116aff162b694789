//! [`Tally`], what one scenario saw, and the rule every raw answer is held to: a 4xx problem+json
//! or a connection the server closed, never a 5xx.
//!
//! Apart because the HTTP attacks and the hostile machines both count into it and the report reads
//! it: the rule of what counts as "as due" is one thing, whoever sends.

use crate::Target;
use crate::raw::Answer;

/// What one scenario saw.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) requests: usize,
    /// Answered as due: a 4xx problem, or a 2xx where lawful input allows one.
    pub(crate) as_due: usize,
    pub(crate) closed: usize,
    pub(crate) server_errors: usize,
    pub(crate) wrong: Vec<String>,
}

impl Tally {
    pub(crate) fn wrong(&mut self, what: String) {
        if self.wrong.len() < 50 {
            self.wrong.push(what);
        }
    }

    /// Holds one raw answer to the rules: a 4xx problem+json, or a connection the server closed.
    pub(crate) fn judge(&mut self, target: &Target, what: &str, answer: Result<Answer, String>) {
        self.judge_allowing(target, what, answer, false);
    }

    /// [`Tally::judge`], where `success_allowed` says a 2xx is right too (input that is hostile
    /// but lawful, such as obs-text in a header the service does not read).
    pub(crate) fn judge_allowing(
        &mut self,
        target: &Target,
        what: &str,
        answer: Result<Answer, String>,
        success_allowed: bool,
    ) {
        self.requests += 1;
        match answer {
            Ok(Answer::Closed) => self.closed += 1,
            Ok(Answer::Status(status, _)) if success_allowed && (200..300).contains(&status) => {
                self.as_due += 1;
            }
            Ok(Answer::Status(status, content_type)) => {
                if status >= 500 {
                    self.server_errors += 1;
                    self.wrong(format!("{}: {what}: {status}", target.name));
                } else if !(400..500).contains(&status) {
                    self.wrong(format!(
                        "{}: {what}: {status} where a refusal was due",
                        target.name
                    ));
                } else if !content_type.starts_with("application/problem+json") {
                    self.wrong(format!(
                        "{}: {what}: {status} as {content_type:?}, not problem+json",
                        target.name
                    ));
                } else {
                    self.as_due += 1;
                }
            }
            Err(e) => self.wrong(format!("{}: {what}: {e}", target.name)),
        }
    }
}
