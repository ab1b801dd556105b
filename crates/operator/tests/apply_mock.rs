//! The apply step's branches that are slow to reach on a cluster (a create
//! racing another, a stale cache, the one 422 a replace fixes, the others it
//! must not, our create's managedFields entry), against a mocked API server
//! (kube's tower-test pattern): each test scripts the requests it expects, in
//! order, and the answers; an unexpected or missing request fails it.

use std::pin::pin;

use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Service;
use kube::{Api, Client, client::Body};
use serde_json::{Value, json};
use tower_test::mock::{self, Handle};
use vllmservice_controller::reconcile::apply::{Applied, FIELD_MANAGER, apply_owned};

const UID: &str = "11111111-2222-3333-4444-555555555555";
const PATH: &str = "/api/v1/namespaces/ns/services";

/// A check on a request's body and content type.
type Check = Box<dyn Fn(&Value, &str) + Send>;

/// One expected request: its method, path, and the answer to give.
struct Step {
    method: &'static str,
    path: String,
    status: u16,
    answer: Value,
    /// Checks on the request's body.
    check: Check,
}

fn step(method: &'static str, path: &str, status: u16, answer: Value) -> Step {
    Step {
        method,
        path: path.to_string(),
        status,
        answer,
        check: Box::new(|_, _| {}),
    }
}

impl Step {
    /// `check(body, content_type)` runs on the request.
    fn checking(mut self, check: impl Fn(&Value, &str) + Send + 'static) -> Step {
        self.check = Box::new(check);
        self
    }
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

/// `status` with the structured cause the API server adds to a refusal.
fn with_cause(mut status: Value, reason: &str, field: &str) -> Value {
    status["details"] = json!({"causes": [{"reason": reason, "field": field}]});
    status
}

/// Answers `steps` in order, then checks that no further request came.
async fn serve(handle: Handle<Request<Body>, Response<Body>>, steps: Vec<Step>) {
    let mut handle = pin!(handle);
    for (i, s) in steps.into_iter().enumerate() {
        let (request, send) = handle
            .next_request()
            .await
            .unwrap_or_else(|| panic!("request {i} ({} {}) never came", s.method, s.path));
        assert_eq!(
            request.method().as_str(),
            s.method,
            "request {i}: {}",
            request.uri()
        );
        assert_eq!(request.uri().path(), s.path, "request {i}");
        let content_type = request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let bytes = request.into_body().collect().await.unwrap().to_bytes();
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        (s.check)(&body, &content_type);
        // A null answer echoes what was sent, as stored (resourceVersion "10").
        let answer = if s.answer.is_null() {
            let mut stored = body.clone();
            stored["metadata"]["resourceVersion"] = json!("10");
            stored
        } else {
            s.answer
        };
        send.send_response(
            Response::builder()
                .status(StatusCode::from_u16(s.status).unwrap())
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                .unwrap(),
        );
    }
    if let Some((request, _)) = handle.next_request().await {
        panic!("unexpected request {} {}", request.method(), request.uri());
    }
}

/// Runs `apply_owned` for `desired` against the scripted API server.
async fn apply(
    cached: Option<Service>,
    desired: Service,
    steps: Vec<Step>,
) -> kube::Result<(Applied, Option<Service>)> {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(serve(handle, steps));
    let result = {
        let api: Api<Service> = Api::namespaced(Client::new(service, "ns"), "ns");
        apply_owned(&api, cached, &desired, UID).await
    };
    server
        .await
        .expect("the scripted API server saw what it expected");
    result
}

fn owner() -> Value {
    json!([{"apiVersion": "aiinfra.example.com/v1alpha1", "kind": "VLLMService",
            "name": "qwen", "uid": UID, "controller": true}])
}

fn desired() -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "qwen", "namespace": "ns", "ownerReferences": owner()},
        "spec": {"ports": [{"name": "http", "port": 8000, "targetPort": "http"}]}
    }))
    .unwrap()
}

/// Ours as the cache holds it, at `rv`, with `spec` and extra metadata.
fn live(rv: &str, spec: Value, meta: Value) -> Value {
    let mut m = json!({"name": "qwen", "namespace": "ns", "resourceVersion": rv,
                       "uid": "live-uid", "ownerReferences": owner()});
    if let (Value::Object(m), Value::Object(extra)) = (&mut m, meta) {
        m.extend(extra);
    }
    json!({"apiVersion": "v1", "kind": "Service", "metadata": m, "spec": spec})
}

fn service(v: &Value) -> Service {
    serde_json::from_value(v.clone()).unwrap()
}

#[tokio::test]
async fn a_create_that_loses_the_race_leaves_the_winners_object_alone() {
    let theirs = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "qwen", "namespace": "ns", "resourceVersion": "3"},
        "spec": {"ports": [{"name": "web", "port": 80}]}});
    let (applied, live) = apply(
        None,
        desired(),
        vec![
            step(
                "POST",
                PATH,
                409,
                status(409, "AlreadyExists", "services \"qwen\" already exists"),
            )
            .checking(|body, _| {
                assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], UID);
            }),
            step("GET", &format!("{PATH}/qwen"), 200, theirs),
        ],
    )
    .await
    .unwrap();
    // No apply, no replace: the scripted server saw only the create and the read.
    assert_eq!((applied, live), (Applied::Foreign, None));
}

#[tokio::test]
async fn a_create_that_finds_our_own_object_not_yet_cached_updates_it() {
    let ours_unseen = live(
        "4",
        json!({"ports": [{"name": "http", "port": 7000}]}),
        json!({}),
    );
    let (applied, _) = apply(
        None,
        desired(),
        vec![
            step("POST", PATH, 409, status(409, "AlreadyExists", "exists")),
            step("GET", &format!("{PATH}/qwen"), 200, ours_unseen.clone()),
            step("PATCH", &format!("{PATH}/qwen"), 200, ours_unseen).checking(|body, ct| {
                assert_eq!(ct, "application/apply-patch+yaml");
                assert_eq!(body["metadata"]["resourceVersion"], "4");
            }),
        ],
    )
    .await
    .unwrap();
    assert_eq!(applied, Applied::Updated);
}

#[tokio::test]
async fn a_stale_cached_copy_is_refused_and_the_decision_made_again_on_the_live_object() {
    let stale = live(
        "1",
        json!({"ports": [{"name": "http", "port": 7000}]}),
        json!({}),
    );
    let newer = live(
        "2",
        json!({"ports": [{"name": "http", "port": 7001}]}),
        json!({}),
    );
    let (applied, _) = apply(
        Some(service(&stale)),
        desired(),
        vec![
            step(
                "PATCH",
                &format!("{PATH}/qwen"),
                409,
                status(409, "Conflict", "the object has been modified"),
            )
            .checking(|body, _| assert_eq!(body["metadata"]["resourceVersion"], "1")),
            step("GET", &format!("{PATH}/qwen"), 200, newer.clone()),
            step("PATCH", &format!("{PATH}/qwen"), 200, newer)
                .checking(|body, _| assert_eq!(body["metadata"]["resourceVersion"], "2")),
        ],
    )
    .await
    .unwrap();
    assert_eq!(applied, Applied::Updated);
}

#[tokio::test]
async fn a_duplicate_entry_is_fixed_by_a_replace_that_keeps_other_managers_fields() {
    // Our port renumbered by a hand edit; others added an annotation and a spec field.
    let cached = live(
        "5",
        json!({"ports": [{"name": "http", "port": 9999, "targetPort": "http"}],
               "sessionAffinity": "ClientIP"}),
        json!({"annotations": {"example.com/owner": "platform"}}),
    );
    let (applied, _) = apply(
        Some(service(&cached)),
        desired(),
        vec![
            step(
                "PATCH",
                &format!("{PATH}/qwen"),
                422,
                // As the API server answers: the cause says which rule, the message
                // only says it in words.
                with_cause(
                    status(
                        422,
                        "Invalid",
                        "Service \"qwen\" is invalid: spec.ports[1].name: Duplicate value: \"http\"",
                    ),
                    "FieldValueDuplicate",
                    "spec.ports[1].name",
                ),
            ),
            step("PUT", &format!("{PATH}/qwen"), 200, cached.clone()).checking(|body, _| {
                assert_eq!(body["metadata"]["resourceVersion"], "5");
                assert_eq!(
                    body["metadata"]["annotations"]["example.com/owner"],
                    "platform"
                );
                assert!(
                    body["metadata"]["annotations"]["aiinfra.example.com/applied-hash"].is_string()
                );
                assert_eq!(body["spec"]["sessionAffinity"], "ClientIP");
                assert_eq!(
                    body["spec"]["ports"],
                    json!([{"name": "http", "port": 8000, "targetPort": "http"}])
                );
                assert!(body.get("status").is_none());
            }),
        ],
    )
    .await
    .unwrap();
    assert_eq!(applied, Applied::Updated);
}

#[tokio::test]
async fn any_other_refusal_is_reported_not_replaced() {
    let cached = live(
        "6",
        json!({"ports": [{"name": "http", "port": 7000}]}),
        json!({}),
    );
    let err = apply(
        Some(service(&cached)),
        desired(),
        vec![step(
            "PATCH",
            &format!("{PATH}/qwen"),
            422,
            status(
                422,
                "Invalid",
                "Service \"qwen\" is invalid: spec.ports[0].port: Invalid value: 70000",
            ),
        )],
    )
    .await
    .unwrap_err();
    match err {
        kube::Error::Api(s) => assert_eq!(s.code, 422),
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn our_creates_update_entry_becomes_our_apply_entry_before_the_first_apply() {
    let cached = live(
        "7",
        json!({"ports": [{"name": "http", "port": 7000}]}),
        json!({"managedFields": [
            {"manager": "kube-controller-manager", "operation": "Update"},
            {"manager": FIELD_MANAGER, "operation": "Update"}]}),
    );
    let converted = live(
        "8",
        json!({"ports": [{"name": "http", "port": 7000}]}),
        json!({}),
    );
    let (applied, _) = apply(
        Some(service(&cached)),
        desired(),
        vec![
            step("PATCH", &format!("{PATH}/qwen"), 200, converted.clone()).checking(|body, ct| {
                assert_eq!(ct, "application/json-patch+json");
                assert_eq!(body, &json!([
                    {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                    {"op": "test", "path": "/metadata/managedFields/1/manager", "value": FIELD_MANAGER},
                    {"op": "test", "path": "/metadata/managedFields/1/operation", "value": "Update"},
                    {"op": "replace", "path": "/metadata/managedFields/1/operation", "value": "Apply"}]));
            }),
            step("PATCH", &format!("{PATH}/qwen"), 200, converted).checking(|body, ct| {
                assert_eq!(ct, "application/apply-patch+yaml");
                assert_eq!(body["metadata"]["resourceVersion"], "8");
            }),
        ],
    )
    .await
    .unwrap();
    assert_eq!(applied, Applied::Updated);
}

#[tokio::test]
async fn an_up_to_date_child_costs_no_request_and_a_foreign_one_is_never_written() {
    // Created: the API server stores what was sent.
    let stored = std::sync::Arc::new(std::sync::Mutex::new(Value::Null));
    let keep = stored.clone();
    let (applied, created) = apply(
        None,
        desired(),
        vec![
            step("POST", PATH, 201, Value::Null).checking(move |body, _| {
                *keep.lock().unwrap() = body.clone();
            }),
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(applied, Applied::Created);
    let live = serde_json::to_value(created.expect("the created object")).unwrap();
    assert!(
        stored.lock().unwrap()["metadata"]["annotations"]["aiinfra.example.com/applied-hash"]
            .is_string(),
        "the create carries the hash of what was applied"
    );
    // Applying the same again: nothing differs, no request at all.
    let (applied, _) = apply(Some(service(&live)), desired(), vec![])
        .await
        .unwrap();
    assert_eq!(applied, Applied::Unchanged);

    let foreign = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "qwen", "namespace": "ns", "resourceVersion": "9"},
        "spec": {"ports": [{"name": "web", "port": 80}]}});
    let (applied, _) = apply(Some(service(&foreign)), desired(), vec![])
        .await
        .unwrap();
    assert_eq!(applied, Applied::Foreign);
}
