//! The read side: ReadStorage, ListStorage (keyset pages, signed `continue` tokens, a bounded scan
//! when a label selector filters) and a volume's usage.

use base64::Engine as _;
use domain::{Code, Selector, Status, Volume, VolumeList, VolumePhase, VolumeStats};
use hmac::{Hmac, Mac};
use service_kit::tenancy::Namespaces;
use sha2::Sha256;

use super::{Ops, OpsError, reasons, to_volume};
use crate::backend::Observed;
use crate::store::{StatusUpdate, VolumeRow};

/// The most rows one ListStorage call examines when a label selector filters them out; past this it
/// answers the matches it has with a `continue` token, so one call's cost stays bounded.
pub const MAX_SCAN: usize = 10_000;
/// Rows fetched per round when a label selector filters.
const SELECTOR_CHUNK: u32 = 500;

/// A ListStorage request, parsed.
#[derive(Debug, Clone)]
pub struct ListRequest {
    /// Only this namespace (all the caller may see when absent).
    pub namespace: Option<String>,
    /// The namespaces the caller may see: a volume elsewhere is not listed, and a page never starts
    /// or ends in one (a `continue` token names its position).
    pub visible: Namespaces,
    /// Only volumes whose labels match.
    pub selector: Option<Selector>,
    /// Page size.
    pub limit: u32,
    /// Start after this key.
    pub after: Option<(String, String)>,
}

/// ListStorage's `continue` tokens: a position, signed so that a token this service did not issue
/// (a forged or edited position) is refused instead of being taken as a place to start from.
///
/// A token is `base64url([namespace, name, list]) "." base64url(HMAC-SHA256(key, first part))`, the
/// MAC cut to [`ContinueTokens::MAC_BYTES`]. `list` names the list it continues ([`list_query`]: the
/// namespace asked, or all, and the selector), so a token is refused for another list, as
/// Kubernetes refuses one (a page of `default` went on in `team-a`). The key lives in the
/// service's database, so a restart (or a second process on the same database) takes the tokens the
/// last one issued.
#[derive(Clone)]
pub struct ContinueTokens {
    key: Vec<u8>,
}

impl std::fmt::Debug for ContinueTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ContinueTokens([REDACTED])")
    }
}

impl ContinueTokens {
    /// Bytes of the MAC a token carries: 128 bits, beyond guessing.
    pub const MAC_BYTES: usize = 16;

    /// Tokens signed with `key`.
    pub fn new(key: &[u8]) -> Self {
        ContinueTokens { key: key.to_vec() }
    }

    fn mac(&self) -> Hmac<Sha256> {
        <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC takes a key of any length")
    }

    /// The token for the position after `namespace/name` in the list `list` ([`list_query`]).
    pub fn encode(&self, namespace: &str, name: &str, list: &str) -> String {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let position = b64.encode(serde_json::to_vec(&[namespace, name, list]).unwrap_or_default());
        let mut mac = self.mac();
        mac.update(position.as_bytes());
        let tag = mac.finalize().into_bytes();
        format!("{position}.{}", b64.encode(&tag[..Self::MAC_BYTES]))
    }

    /// The position a token this service issued for the list `list` stands for; any other token
    /// is a 400.
    pub fn decode(&self, token: &str, list: &str) -> Result<(String, String), Status> {
        let bad = || {
            Status::invalid_query(
                "continue",
                "is not a token this service issued; start again without it",
            )
        };
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let (position, tag) = token.split_once('.').ok_or_else(bad)?;
        let tag = b64.decode(tag).map_err(|_| bad())?;
        if tag.len() != Self::MAC_BYTES {
            return Err(bad());
        }
        let mut mac = self.mac();
        mac.update(position.as_bytes());
        // Compared in constant time: a caller learns nothing from how fast a guess was refused.
        mac.verify_truncated_left(&tag).map_err(|_| bad())?;
        let bytes = b64.decode(position).map_err(|_| bad())?;
        let [namespace, name, issued_for]: [String; 3] =
            serde_json::from_slice(&bytes).map_err(|_| bad())?;
        if issued_for != list {
            return Err(Status::invalid_query(
                "continue",
                "was issued for another list (another namespace or selector); ask for the same list, or start again without it",
            ));
        }
        Ok((namespace, name))
    }
}

/// What a `continue` token is bound to: the namespace a list asked for (`*`: all it may see) and
/// its selector.
pub fn list_query(namespace: Option<&str>, selector: Option<&Selector>) -> String {
    // JSON, so no two lists share a text (the fuzz target found `*` the namespace and `*` for all
    // alike when the two were joined with a separator).
    serde_json::to_string(&(namespace, selector.map(ToString::to_string))).unwrap_or_default()
}

impl Ops {
    /// ReadStorage.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Volume, OpsError> {
        let row = self
            .store
            .get(namespace, name)
            .await?
            .ok_or_else(|| OpsError::NotFound {
                namespace: namespace.to_string(),
                name: name.to_string(),
            })?;
        Ok(to_volume(&self.refresh(row).await))
    }

    /// A Pending volume whose backend binds in its own time, as the backend sees it now: a caller
    /// waiting for Ready (`berth volume create --wait`) is not held to the reconciler's period.
    /// Left as stored when someone is working on it, or the backend cannot say.
    pub(super) async fn refresh(&self, row: VolumeRow) -> VolumeRow {
        if row.phase != VolumePhase::Pending {
            return row;
        }
        let Ok(backend) = self.stored_backend(&row) else {
            return row;
        };
        if !backend.observes() {
            return row;
        }
        let Some(_guard) = self.locks.try_lock(&row.namespace, &row.name) else {
            return row;
        };
        let update = match backend.observe(&row.object_ref()).await {
            Ok(Observed::Pending { message }) if message == row.message => return row,
            Ok(Observed::Pending { message }) => StatusUpdate {
                phase: VolumePhase::Pending,
                reason: reasons::BINDING.into(),
                message,
                location: None,
            },
            Ok(Observed::Ready { location, message }) => StatusUpdate {
                phase: VolumePhase::Ready,
                reason: reasons::PROVISIONED.into(),
                message,
                location: Some(location),
            },
            Ok(Observed::Failed { reason, message }) => StatusUpdate {
                phase: VolumePhase::Failed,
                reason: reason.into(),
                message,
                location: None,
            },
            Err(e) => {
                tracing::debug!(namespace = %row.namespace, name = %row.name, error = %e, "a pending volume's state could not be read");
                return row;
            }
        };
        match self.store.set_status(&row.uid, update).await {
            Ok(Some(updated)) => updated,
            _ => row,
        }
    }

    /// ListStorage: one keyset page; with a selector, rounds of rows until the page is full, the
    /// table ends, or [`MAX_SCAN`] rows were examined.
    pub async fn list(&self, req: ListRequest) -> Result<VolumeList, OpsError> {
        if let Some(ns) = &req.namespace
            && !req.visible.allows(ns)
        {
            // Another tenant's namespace lists as an empty one does.
            return Ok(VolumeList {
                metadata: None,
                items: Vec::new(),
                continue_token: None,
            });
        }
        let query = list_query(req.namespace.as_deref(), req.selector.as_ref());
        let limit = req.limit.max(1) as usize;
        let mut after = req.after.clone();
        let mut items = Vec::new();
        let mut scanned = 0usize;
        loop {
            let want = match &req.selector {
                None => (limit - items.len() + 1) as u32,
                Some(_) => SELECTOR_CHUNK,
            };
            let rows = self
                .page_visible(
                    req.namespace.as_deref(),
                    &req.visible,
                    after.as_ref().map(|(a, b)| (a.as_str(), b.as_str())),
                    want,
                )
                .await?;
            let exhausted = rows.len() < want as usize;
            let fetched = rows.len();
            for (i, row) in rows.into_iter().enumerate() {
                scanned += 1;
                if req.selector.as_ref().is_none_or(|s| s.matches(&row.labels)) {
                    items.push(to_volume(&row));
                }
                after = Some((row.namespace, row.name));
                if items.len() == limit {
                    let more = i + 1 < fetched || !exhausted;
                    return Ok(VolumeList {
                        metadata: None,
                        items,
                        continue_token: more
                            .then(|| {
                                after
                                    .as_ref()
                                    .map(|(a, b)| self.encode_continue(a, b, &query))
                            })
                            .flatten(),
                    });
                }
            }
            if exhausted {
                return Ok(VolumeList {
                    metadata: None,
                    items,
                    continue_token: None,
                });
            }
            if scanned >= MAX_SCAN {
                return Ok(VolumeList {
                    metadata: None,
                    items,
                    continue_token: after
                        .as_ref()
                        .map(|(a, b)| self.encode_continue(a, b, &query)),
                });
            }
        }
    }

    /// Up to `limit` volumes after `after` in (namespace, name) order, in `namespace` when given,
    /// and only in namespaces `visible` allows: for a caller of some namespaces, a range of each in
    /// turn, so no other namespace's row is read, nor its position put in a `continue` token.
    async fn page_visible(
        &self,
        namespace: Option<&str>,
        visible: &Namespaces,
        after: Option<(&str, &str)>,
        limit: u32,
    ) -> Result<Vec<crate::store::VolumeRow>, OpsError> {
        let set = match (namespace, visible) {
            (Some(_), _) | (None, Namespaces::All) => {
                return Ok(self.store.page(namespace, after, limit).await?);
            }
            (None, Namespaces::Only(set)) => set,
        };
        let mut rows = Vec::new();
        let from = after.map(|(ns, _)| ns).unwrap_or_default();
        for ns in set.range::<str, _>((std::ops::Bound::Included(from), std::ops::Bound::Unbounded))
        {
            let want = limit - rows.len() as u32;
            if want == 0 {
                break;
            }
            rows.extend(self.store.page(Some(ns), after, want).await?);
        }
        Ok(rows)
    }

    /// What a volume uses.
    pub async fn stats(&self, namespace: &str, name: &str) -> Result<VolumeStats, OpsError> {
        let row = self
            .store
            .get(namespace, name)
            .await?
            .ok_or_else(|| OpsError::NotFound {
                namespace: namespace.to_string(),
                name: name.to_string(),
            })?;
        if row.phase != VolumePhase::Ready {
            return Err(OpsError::NotReady {
                namespace: row.namespace,
                name: row.name,
                phase: row.phase,
            });
        }
        let backend = self.stored_backend(&row)?;
        let usage = backend
            .usage(&row.object_ref())
            .await
            .map_err(|e| match e.code {
                Code::NotFound => OpsError::ObjectGone {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    cause: e,
                },
                _ => OpsError::Usage(e),
            })?;
        Ok(VolumeStats {
            namespace: row.namespace,
            name: row.name,
            uid: row.uid,
            capacity_bytes: row.capacity_bytes,
            used_bytes: usage.used_bytes,
            available_bytes: domain::volume::still_available(
                row.capacity_bytes,
                usage.used_bytes,
                usage.available_bytes,
            ),
            location: row.location,
            source: usage.source.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_foreign_ones_are_refused() {
        use base64::Engine as _;
        let tokens = ContinueTokens::new(b"key one");
        let list = list_query(Some("ns"), None);
        let t = tokens.encode("ns", "a.b", &list);
        assert_eq!(
            tokens.decode(&t, &list).unwrap(),
            ("ns".into(), "a.b".into())
        );
        // Another list's token: refused, naming why.
        let e = tokens
            .decode(&t, &list_query(Some("team-a"), None))
            .unwrap_err();
        assert!(e.message.contains("another list"), "{}", e.message);
        // No two lists share a text (the fuzz target's find: `*` the namespace was all of them).
        assert_ne!(list_query(Some("*"), None), list_query(None, None));
        let selected: Selector = "tier=gold".parse().unwrap();
        assert!(
            tokens
                .decode(&t, &list_query(Some("ns"), Some(&selected)))
                .is_err()
        );
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let (position, mac) = t.split_once('.').unwrap();
        let unsigned = b64.encode(br#"["../..","%"]"#);
        let edited = format!("{}.{mac}", b64.encode(br#"["ns","z","[\"ns\",null]"]"#));
        for foreign in [
            "not-a-token".to_string(),
            unsigned.clone(),
            format!("{unsigned}.{mac}"),
            edited,
            format!("{position}."),
            format!("{position}.{}", &mac[..mac.len() - 2]),
            ContinueTokens::new(b"key two").encode("ns", "a.b", &list),
        ] {
            let e = tokens.decode(&foreign, &list).unwrap_err();
            assert_eq!(e.code, Code::InvalidArgument);
            assert!(
                e.message.starts_with("query parameter continue: "),
                "{}",
                e.message
            );
        }
        assert_eq!(format!("{tokens:?}"), "ContinueTokens([REDACTED])");
    }
}
