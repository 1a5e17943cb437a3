//! The OpenAPI document is the router's: every operation it lists is served by a route at that
//! path and method, and the document served at `/api/openapi.json` is the one generated from the
//! routes.

use reqwest::Method;

use crate::served::{Served, Setup, json};

#[tokio::test]
async fn every_operation_in_the_openapi_document_is_served_at_its_path_and_method() {
    let s = Served::sqlite(Setup::default()).await;
    let doc = serde_json::to_value(rowfire::http::api::openapi()).unwrap();
    let (status, served) = json(s.get("/api/openapi.json")).await;
    assert_eq!(status, 200);
    assert_eq!(served, doc, "the served document is the generated one");

    let paths = doc["paths"].as_object().expect("paths");
    assert!(paths.len() >= 2, "{paths:?}");
    let mut ids = std::collections::BTreeSet::new();
    for (path, item) in paths {
        assert!(path.starts_with("/api/"), "{path} is under /api");
        for (method, op) in item.as_object().unwrap() {
            let Ok(m) = Method::from_bytes(method.to_ascii_uppercase().as_bytes()) else {
                continue;
            };
            let id = op["operationId"].as_str().unwrap_or_default().to_string();
            assert!(
                !id.is_empty() && ids.insert(id.clone()),
                "{method} {path}: a unique operationId"
            );
            assert!(
                op["responses"].as_object().is_some_and(|r| !r.is_empty()),
                "{method} {path} documents its responses"
            );
            // Every parameter said to be in the path is a `{name}` of the path (the `why`
            // route's query was documented as two path parameters).
            for param in op["parameters"].as_array().into_iter().flatten() {
                let name = param["name"].as_str().unwrap_or_default();
                if param["in"] == "path" {
                    assert!(
                        path.contains(&format!("{{{name}}}")),
                        "{method} {path}: path parameter {name} is not in the path"
                    );
                }
            }
            // Fill path parameters with a name nothing has.
            let concrete = path
                .split('/')
                .map(|part| {
                    if part.starts_with('{') {
                        "no-such-thing"
                    } else {
                        part
                    }
                })
                .collect::<Vec<_>>()
                .join("/");
            let mut request = s.request(m.clone(), &concrete);
            if m != Method::GET {
                request = request
                    .header("content-type", "application/json")
                    .body("{}");
            }
            let response = request.send().await.unwrap();
            let code = response.status().as_u16();
            let body = response.text().await.unwrap();
            assert_ne!(code, 405, "{method} {path}: the router serves this method");
            let ours: Result<serde_json::Value, _> = serde_json::from_str(&body);
            assert!(
                ours.is_ok(),
                "{method} {concrete} answers JSON ({code}): {body}"
            );
            if code == 404 {
                let message = ours.unwrap()["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                assert!(
                    !message.starts_with("nothing is served at"),
                    "{method} {path}: a route serves it ({message})"
                );
            }
            assert!(code < 500, "{method} {concrete}: {code} {body}");
        }
    }
}

#[tokio::test]
async fn a_path_no_route_serves_answers_a_json_404() {
    let s = Served::sqlite(Setup::default()).await;
    let (status, body) = json(s.get("/api/no-such-route")).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "not_found");
}

/// A method a route does not serve answers JSON like every other error.
#[tokio::test]
async fn a_method_a_route_does_not_serve_answers_a_json_405() {
    let s = Served::sqlite(Setup::default()).await;
    for method in [Method::DELETE, Method::PUT, Method::TRACE] {
        let (status, body) = json(s.request(method.clone(), "/api/status")).await;
        assert_eq!(status, 405, "{method}: {body}");
        assert_eq!(body["error"]["code"], "method_not_allowed", "{method}");
    }
}
