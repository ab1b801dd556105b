//! The requests an operator's client sends, recorded by a tower layer, for
//! tests that count them (e.g. which resources were listed again).

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use http::Request;
use kube::client::Body;
use tower::util::MapRequestLayer;

/// Every request seen, as "METHOD URI".
#[derive(Clone, Default)]
pub struct Requests(Arc<Mutex<Vec<String>>>);

impl Requests {
    /// A layer for kube's `ClientBuilder` that records into `self`.
    pub fn layer(
        &self,
    ) -> MapRequestLayer<impl Fn(Request<Body>) -> Request<Body> + Clone + use<>> {
        let requests = self.clone();
        MapRequestLayer::new(move |req: Request<Body>| {
            requests.record(&format!("{} {}", req.method(), req.uri()));
            req
        })
    }

    pub fn record(&self, request: &str) {
        self.0.lock().unwrap().push(request.to_string());
    }

    /// LIST requests so far, per resource: GETs of a collection
    /// (`/api/v1/[namespaces/NS/]RES`, `/apis/G/V/[namespaces/NS/]RES`) that are not watches.
    pub fn lists(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for request in self.0.lock().unwrap().iter() {
            let Some(uri) = request.strip_prefix("GET ") else {
                continue;
            };
            let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
            if query.split('&').any(|q| q == "watch=true") {
                continue;
            }
            let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
            let rest = match segments.first() {
                Some(&"api") => &segments[2.min(segments.len())..],
                Some(&"apis") => &segments[3.min(segments.len())..],
                _ => continue,
            };
            // A collection: `RES` or `namespaces/NS/RES` after the version
            // (not an object's subresource such as `pods/NAME/log`).
            if rest.len() == 1 || (rest.len() == 3 && rest[0] == "namespaces") {
                *out.entry(rest[rest.len() - 1].to_string()).or_default() += 1;
            }
        }
        out
    }
}
