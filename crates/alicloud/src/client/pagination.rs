//! Following `NextToken` across pages, for the `describe_all_*` actions.
//!
//! Apart because it is the one place a misbehaving endpoint could keep a call going forever (a
//! token that never ends or repeats): the guard against that is read on its own.

use super::EcsClient;
use crate::error::Error;
use crate::model::Page;

/// Pages fetched by one `describe_all_*` call before it gives up: a guard against an endpoint that
/// keeps returning tokens (1 000 pages of 100 is 100 000 resources).
const MAX_PAGES: usize = 1000;

impl EcsClient {
    pub(super) async fn collect_pages<T, F, Fut>(
        &self,
        action: &str,
        out: &mut Vec<T>,
        mut fetch: F,
    ) -> Result<(), Error>
    where
        F: FnMut(Option<String>) -> Fut,
        Fut: Future<Output = Result<Page<T>, Error>>,
    {
        let mut token: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let page = fetch(token.clone()).await?;
            out.extend(page.items);
            match page.next_token {
                None => return Ok(()),
                // A token that does not move would loop forever.
                Some(next) if Some(&next) == token.as_ref() => {
                    return Err(Error::Decode {
                        action: action.to_owned(),
                        http_status: 200,
                        message: "NextToken repeated the previous page's token".into(),
                    });
                }
                Some(next) => token = Some(next),
            }
        }
        Err(Error::Decode {
            action: action.to_owned(),
            http_status: 200,
            message: format!("more than {MAX_PAGES} pages"),
        })
    }
}
