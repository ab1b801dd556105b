//! Who may read `/metrics`: the bearer token of a request is checked with the
//! API server, as controller-runtime's metrics filter does: a TokenReview says
//! who it is, a SubjectAccessReview whether that user may `get` the
//! non-resource URL `/metrics` (RBAC: a ClusterRole with
//! `nonResourceURLs: [/metrics]`). An allowed token is remembered for a
//! minute, so a scraper every few seconds costs two API requests a minute,
//! not two a scrape; a refusal for 10 s. I/O: the two reviews (creates, through the client given).

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    authentication::v1::{TokenReview, TokenReviewSpec},
    authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
};
use kube::{Api, Client, api::PostParams};

/// The path and verb a scraper must be allowed.
pub const METRICS_PATH: &str = "/metrics";
const METRICS_VERB: &str = "get";
/// How long an allowed verdict is reused.
const ALLOWED_TTL: Duration = Duration::from_secs(60);
/// How long a refusal is reused: short, so that a scraper just bound to the
/// reader role is let in soon.
const REFUSED_TTL: Duration = Duration::from_secs(10);
/// Distinct tokens remembered at once; beyond, the memory starts afresh.
const MAX_VERDICTS: usize = 256;

/// What the API server said about a request's token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The token's user may get `/metrics`.
    Allowed,
    /// No token, or one the API server does not accept (answer 401).
    Unauthenticated(String),
    /// A valid token whose user may not get `/metrics` (answer 403).
    Forbidden(String),
}

/// Checks scrapers' tokens through the API server.
pub struct Authorizer {
    client: Client,
    verdicts: Mutex<HashMap<String, (Instant, Verdict)>>,
}

impl Authorizer {
    pub fn new(client: Client) -> Authorizer {
        Authorizer {
            client,
            verdicts: Mutex::default(),
        }
    }

    /// The verdict on the `Authorization` header's value. Errors are the API
    /// server's (e.g. a 403 when the operator lacks the review rules).
    pub async fn check(&self, authorization: Option<&str>) -> kube::Result<Verdict> {
        let Some(token) = authorization
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
        else {
            return Ok(Verdict::Unauthenticated(
                "a bearer token is required".into(),
            ));
        };
        if let Some(v) = self.remembered(token) {
            return Ok(v);
        }
        let verdict = self.review(token).await?;
        let mut verdicts = self.verdicts.lock().expect("verdicts lock");
        if verdicts.len() >= MAX_VERDICTS {
            verdicts.clear();
        }
        verdicts.insert(token.to_string(), (Instant::now(), verdict.clone()));
        Ok(verdict)
    }

    fn remembered(&self, token: &str) -> Option<Verdict> {
        let verdicts = self.verdicts.lock().expect("verdicts lock");
        let (at, v) = verdicts.get(token)?;
        let ttl = if *v == Verdict::Allowed {
            ALLOWED_TTL
        } else {
            REFUSED_TTL
        };
        (at.elapsed() < ttl).then(|| v.clone())
    }

    async fn review(&self, token: &str) -> kube::Result<Verdict> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let status = reviewed.status.unwrap_or_default();
        let user = match status.user {
            Some(user) if status.authenticated == Some(true) => user,
            _ => {
                return Ok(Verdict::Unauthenticated(
                    status
                        .error
                        .unwrap_or_else(|| "the token is not valid".into()),
                ));
            }
        };
        let name = user.username.clone().unwrap_or_default();
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(METRICS_PATH.into()),
                    verb: Some(METRICS_VERB.into()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let decided = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await?;
        Ok(if decided.status.is_some_and(|s| s.allowed) {
            Verdict::Allowed
        } else {
            Verdict::Forbidden(format!(
                "{name} may not get {METRICS_PATH} (a ClusterRole with nonResourceURLs [{METRICS_PATH}], verb get)"
            ))
        })
    }
}
