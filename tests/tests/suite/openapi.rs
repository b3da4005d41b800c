//! `openapi.yaml` and the code agree: the same operations, and every status
//! the function can answer is documented (as problem+json for errors); what
//! the spec adds beyond that is only what API Gateway answers on its own.

use std::collections::BTreeSet;

use outbox_tests::api::{TestApi, BOB};
use outbox_tests::TestDb;
use serde_json::Value;
use shared::api::OPERATIONS;

/// The spec as JSON, read by PyYAML with duplicate keys refused (YAML
/// would otherwise keep the last of two, silently).
fn spec() -> Value {
    let python = std::env::var("OUTBOX_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = r#"
import json, sys, yaml
class Strict(yaml.SafeLoader):
    pass
def mapping(loader, node, deep=False):
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    dup = {k for k in keys if keys.count(k) > 1}
    if dup:
        raise SystemExit(f"duplicate keys {sorted(map(str, dup))} at line {node.start_mark.line + 1}")
    return yaml.SafeLoader.construct_mapping(loader, node, deep)
Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
print(json.dumps(yaml.load(open(sys.argv[1]), Loader=Strict)))
"#;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../openapi.yaml");
    let out = std::process::Command::new(python).args(["-c", script, path]).output().expect("run python");
    assert!(out.status.success(), "openapi.yaml: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Resolves a local `$ref`.
fn resolve<'a>(spec: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => spec.pointer(r.trim_start_matches('#')).unwrap_or_else(|| panic!("dangling $ref {r}")),
        None => v,
    }
}

#[test]
fn the_spec_documents_exactly_the_operations_and_statuses_of_the_code() {
    let spec = spec();
    assert!(spec["openapi"].as_str().unwrap().starts_with("3.1"));
    let mut documented = BTreeSet::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap().iter().filter(|(_, op)| op.get("responses").is_some()) {
            documented.insert((method.to_uppercase(), path.clone(), op["operationId"].as_str().unwrap().to_string()));
        }
    }
    let coded: BTreeSet<_> =
        OPERATIONS.iter().map(|o| (o.method.to_string(), o.path.to_string(), o.id.to_string())).collect();
    assert_eq!(documented, coded, "operations in openapi.yaml vs shared::api::OPERATIONS");

    for op in OPERATIONS {
        let responses = &spec["paths"][op.path][op.method.to_lowercase()]["responses"];
        let in_spec: BTreeSet<u16> = responses.as_object().unwrap().keys().map(|k| k.parse().unwrap()).collect();
        for status in op.statuses {
            let response = resolve(&spec, &responses[status.to_string()]);
            assert!(
                !response.is_null(),
                "{} {}: the function answers {status}, the spec does not say so",
                op.method,
                op.path
            );
            if *status >= 400 {
                assert!(
                    response["content"].get("application/problem+json").is_some(),
                    "{} {}: {status} comes from the function as problem+json",
                    op.method,
                    op.path
                );
            }
        }
        for extra in in_spec.iter().filter(|s| !op.statuses.contains(s)) {
            let response = resolve(&spec, &responses[extra.to_string()]);
            let types: Vec<&String> = response["content"].as_object().unwrap().keys().collect();
            assert_eq!(
                types,
                vec!["application/json"],
                "{} {}: {extra} is documented but the function never answers it; only API Gateway's own (application/json) may be",
                op.method,
                op.path
            );
        }
    }
}

#[tokio::test]
async fn every_documented_operation_is_routed() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let id = uuid::Uuid::now_v7().to_string();
    for op in OPERATIONS {
        let path = op.path.replace("{id}", &id);
        let resp = api.send(op.method, &path, Some(BOB), &[], Some("{}")).await;
        assert!(![405].contains(&resp.status), "{} {path}: {}", op.method, resp.body);
        let detail = resp.body["detail"].as_str().unwrap_or("");
        assert!(!detail.starts_with("no route"), "{} {path} is not routed: {detail}", op.method);
        assert!(
            op.statuses.contains(&resp.status),
            "{} {path} answered {}, not in its statuses",
            op.method,
            resp.status
        );
    }
}

/// The template's HTTP API routes the same operations to the booking API
/// function, and names each event after its operationId (the operator
/// console's routes, under `/console`, go to its own function).
#[test]
fn the_template_routes_exactly_the_documented_operations() {
    let template = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../template.yaml")).unwrap();
    let lines: Vec<&str> = template.lines().collect();
    let mut routed = BTreeSet::new();
    let mut console = BTreeSet::new();
    let mut function = "";
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with("  ") && !line.starts_with("   ") && line.trim_end().ends_with(':') {
            function = line.trim().trim_end_matches(':');
        }
        if line.trim() == "Type: HttpApi" && function == "OperatorConsoleFunction" {
            let path = lines[i..i + 6].iter().find_map(|l| l.trim().strip_prefix("Path:")).unwrap().trim();
            console.insert(path.to_string());
        } else if line.trim() == "Type: HttpApi" {
            let name = lines[i - 1].trim().trim_end_matches(':').to_string();
            let field = |key: &str| {
                lines[i..i + 6].iter().find_map(|l| l.trim().strip_prefix(key)).map(str::trim).unwrap().to_string()
            };
            routed.insert((field("Method:"), field("Path:"), name));
        }
    }
    let coded: BTreeSet<_> = OPERATIONS
        .iter()
        .map(|o| {
            let mut name = o.id.to_string();
            name[..1].make_ascii_uppercase();
            (o.method.to_string(), o.path.to_string(), name)
        })
        .collect();
    assert_eq!(routed, coded, "template.yaml's HttpApi events vs shared::api::OPERATIONS");
    assert!(console.iter().all(|p| p == "/console" || p.starts_with("/console/")), "{console:?}");
    assert_eq!(console.len(), 3, "the console's page, its assets and its API: {console:?}");
}

/// Every length and count limit the spec states is the code's own constant.
#[test]
fn the_spec_limits_are_the_domain_constants() {
    use shared::booking::domain::*;
    let spec = spec();
    let schema = |name: &str| spec.pointer(&format!("/components/schemas/{name}")).unwrap_or_else(|| panic!("{name}"));
    for (name, max) in [
        ("Title", MAX_TITLE_CHARS),
        ("DisplayName", MAX_NAME_CHARS),
        ("Location", MAX_LOCATION_CHARS),
        ("Description", MAX_DESCRIPTION_CHARS),
        ("EmailAddress", MAX_EMAIL_CHARS),
    ] {
        assert_eq!(schema(name)["maxLength"].as_u64(), Some(max as u64), "{name}.maxLength");
    }
    assert_eq!(schema("Attendees")["maxItems"].as_u64(), Some(MAX_ATTENDEES as u64), "Attendees.maxItems");
    let stored = &schema("Booking")["properties"]["attendees"]["maxItems"];
    assert_eq!(stored.as_u64(), Some(MAX_ATTENDEES as u64), "Booking.attendees.maxItems");
}
