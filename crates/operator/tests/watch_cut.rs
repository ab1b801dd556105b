//! A watch whose connection breaks resumes by itself, and only it lists again:
//! a tower layer on the operator's client cuts the response body of chosen
//! watches (as a dropped connection does) and counts the LIST requests per
//! resource. Cutting the PVC watch re-lists PVCs only (kube's watcher alone
//! would resume from the old resourceVersion), and the operator still sees
//! what changes afterwards. (A lost connection of the CRD watch is taken as
//! the API server's loss and rebuilds every watch: `runtime::discovery`.)

mod common;

use std::{
    collections::BTreeMap,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use bytes::Bytes;
use common::{Env, Operator, requests::Requests};
use futures::StreamExt;
use http_body_util::{BodyStream, StreamBody};
use tokio::sync::watch;
use vllmservice_controller::runtime::metrics::{Metrics, count_writes};

/// The resources whose watches are cut, the cut signal, and every request seen.
#[derive(Clone)]
struct Cutter {
    resources: &'static [&'static str],
    cut: watch::Receiver<u32>,
    requests: Requests,
}

impl Cutter {
    fn lists(&self) -> BTreeMap<String, usize> {
        self.requests.lists()
    }
}

impl<S> tower::Layer<S> for Cutter {
    type Service = Cut<S>;
    fn layer(&self, inner: S) -> Cut<S> {
        Cut {
            inner,
            cutter: self.clone(),
        }
    }
}

#[derive(Clone)]
struct Cut<S> {
    inner: S,
    cutter: Cutter,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Frames =
    Pin<Box<dyn futures::Stream<Item = Result<http_body::Frame<Bytes>, BoxError>> + Send>>;

impl<S, B, RB> tower::Service<http::Request<B>> for Cut<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    RB: http_body::Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    type Response = http::Response<StreamBody<Frames>>;
    type Error = S::Error;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let uri = req.uri().to_string();
        let request = format!("{} {uri}", req.method());
        self.cutter.requests.record(&request);
        let is_watch = uri.contains("watch=true");
        let target = self.cutter.resources.iter().any(|r| {
            uri.split('?')
                .next()
                .unwrap_or("")
                .ends_with(&format!("/{r}"))
        });
        let mut cut = self.cutter.cut.clone();
        let seen = *cut.borrow_and_update();
        let response = self.inner.call(req);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| {
                let frames = BodyStream::new(body).map(|f| f.map_err(Into::into));
                let frames: Frames = if is_watch && target {
                    // This watch ends with an error at the next cut, as when its
                    // connection breaks.
                    let cut = async move {
                        let _ = cut.wait_for(|n| *n > seen).await;
                    };
                    Box::pin(frames.take_until(cut).chain(futures::stream::once(async {
                        Err::<http_body::Frame<Bytes>, BoxError>(
                            "connection cut by the test".into(),
                        )
                    })))
                } else {
                    Box::pin(frames)
                };
                StreamBody::new(frames)
            }))
        })
    }
}

/// Run on a thread with an 8 MiB stack, as the binary's main thread has: in
/// this debug build the operator's futures behind the extra layer overflowed
/// the test harness's 2 MiB thread.
#[test]
fn a_cut_watch_lists_again_alone_and_keeps_seeing_changes() {
    std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime")
                .block_on(cut_watch())
        })
        .expect("a test thread")
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
}

async fn cut_watch() {
    testkit::install_all_crds();
    let client = testkit::client().await;
    let ns = testkit::TestNamespace::new(&client, "watch-cut").await;
    let (cut, cut_rx) = watch::channel(0u32);
    let cutter = Cutter {
        resources: &["persistentvolumeclaims"],
        cut: cut_rx,
        requests: Requests::default(),
    };
    let metrics = Arc::new(Metrics::default());
    let operator_client = kube::client::ClientBuilder::try_from(testkit::config().await)
        .expect("client builder")
        .with_layer(&count_writes(metrics.clone()))
        .with_layer(&cutter)
        .build();
    let env = Env {
        operator: Operator::start_with(operator_client, metrics, &ns.name, true),
        client,
        ns,
    };
    env.bound_pvc("models").await;
    env.create(common::gpu_service("qwen", "models")).await;
    env.wait_for("qwen", "Available", common::is_available)
        .await;

    let before = cutter.lists();
    for resource in [
        "persistentvolumeclaims",
        "deployments",
        "pods",
        "nodes",
        "services",
    ] {
        assert!(
            before.contains_key(resource),
            "no list of {resource}: {before:?}"
        );
    }
    cut.send_modify(|n| *n += 1);
    // The cut watch lists again (its own signal)...
    testkit::wait_until(
        std::time::Duration::from_secs(60),
        "the cut watch to list again",
        || {
            let now = cutter.lists();
            let before = before.clone();
            async move {
                let again = |r: &str| now.get(r) > before.get(r);
                again("persistentvolumeclaims").then_some(())
            }
        },
    )
    .await;
    // ...and they still deliver: a new claim reaches a new service.
    env.bound_pvc("models-b").await;
    env.create(common::gpu_service("qwen-b", "models-b")).await;
    env.wait_for("qwen-b", "Available after the cut", common::is_available)
        .await;
    // No other watch listed again.
    let after = cutter.lists();
    for (resource, n) in &before {
        // The CRD lists of discovery are not a watch's.
        if resource == "persistentvolumeclaims" || resource == "customresourcedefinitions" {
            continue;
        }
        assert_eq!(
            after.get(resource),
            Some(n),
            "{resource} was listed again though its watch was not cut: {before:?} -> {after:?}"
        );
    }
    assert!(env.operator.is_running());
}
