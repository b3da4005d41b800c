//! What an operator sees: EMF metrics with the names the template's alarms
//! use, a health summary from the poller, and logs without addresses.

use outbox_tests::outbox::*;
use outbox_tests::TestDb;
use serde_json::Value;
use shared::relay::RunSummary;
use shared::telemetry::emf;

fn emf_lines(stdout: &str) -> Vec<Value> {
    stdout.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|v| v.get("_aws").is_some()).collect()
}

fn metric_names(record: &Value) -> Vec<String> {
    record["_aws"]["CloudWatchMetrics"][0]["Metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["Name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn emf_records_have_the_aws_block_and_every_poller_metric() {
    let summary = RunSummary { claimed: 3, sent: 5, dead_lettered: 1, ..RunSummary::default() };
    let record: Value = serde_json::from_str(&emf::record("outbox-poller", &summary.metrics()).to_string()).unwrap();
    let aws = &record["_aws"];
    assert!(aws["Timestamp"].as_i64().unwrap() > 1_700_000_000_000);
    assert_eq!(aws["CloudWatchMetrics"][0]["Namespace"], "BookingOutbox");
    assert_eq!(aws["CloudWatchMetrics"][0]["Dimensions"], serde_json::json!([["Function"]]));
    assert_eq!(record["Function"], "outbox-poller");
    let names = metric_names(&record);
    for required in ["Claimed", "Sent", "Released", "Unknown", "PermanentlyFailed", "DeadLettered", "BatchDurationMs"] {
        assert!(names.contains(&required.to_string()), "{required} missing from {names:?}");
        assert!(record[required].is_number(), "{required} has a value");
    }
    assert_eq!(record["Sent"], 5.0);
}

#[tokio::test]
async fn poller_invocation_emits_emf_and_returns_a_health_summary_without_addresses_in_logs() {
    let db = TestDb::create().await;
    create_booking(&db, 1, &["alice@example.com", "carol@example.com"]).await;
    let worker = Worker::new(env!("CARGO_BIN_EXE_outbox-worker"));
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_outbox-worker"))
        .arg("invoke")
        .arg(&worker.journal)
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "debug")
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let records = emf_lines(&stdout);
    assert_eq!(records.len(), 1, "one EMF record per invocation");
    let names = metric_names(&records[0]);
    assert!(names.contains(&"OldestPendingAgeSeconds".to_string()), "{names:?}");
    assert_eq!(records[0]["Sent"], 2.0);
    let health: Value = stdout.lines().rev().find_map(|l| serde_json::from_str::<Value>(l).ok()).unwrap();
    assert_eq!(health["summary"]["sent"], 2);
    assert_eq!(health["oldest_due_pending_age_secs"], 0.0);
    // Logs carry ids but never a recipient's address.
    assert!(stdout.contains("event_id") && stdout.contains("booking_id"), "ids in the logs");
    assert!(stdout.contains("a***@example.com"), "masked address logged");
    let all = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(!all.contains("alice@example.com") && !all.contains("carol@example.com"), "no PII in logs:\n{all}");
}

#[test]
fn every_alarm_on_an_outbox_metric_names_a_metric_the_code_emits() {
    let template = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../template.yaml")).unwrap();
    let recorded = shared::notify::evidence::feedback::Recorded::Recorded { confirmed: true, suppressed: 0 };
    let emitted: Vec<String> = RunSummary::default()
        .metrics()
        .into_iter()
        .chain(shared::relay::SweepRun::default().metrics())
        .chain(std::iter::once(("SesWatermarkAgeSeconds", 0.0, emf::Unit::Seconds)))
        .chain(shared::notify::evidence::intake::metrics(&shared::notify::evidence::ses_event::Kind::Send, &recorded))
        .map(|m| m.0.to_string())
        .collect();
    let mut checked = 0;
    let lines: Vec<&str> = template.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() == "Namespace: BookingOutbox" {
            let metric = lines[i + 1].trim().strip_prefix("MetricName: ").expect("MetricName follows Namespace");
            assert!(emitted.contains(&metric.to_string()), "alarm on {metric}, which nothing emits");
            checked += 1;
        }
    }
    assert!(
        checked >= 5,
        "dead letters, sends left for an operator, SES's evidence and oldest-pending age have alarms"
    );
}

/// The metrics each function emits, by its `Function` dimension.
fn emitted_by(function: &str) -> Vec<String> {
    let names = |metrics: Vec<(&'static str, f64, emf::Unit)>| metrics.into_iter().map(|m| m.0.to_string()).collect();
    match function {
        "outbox-poller" => names(
            shared::relay::Health {
                summary: RunSummary::default(),
                oldest_due_pending_age_secs: 0.0,
                duration_ms: 0,
                claiming_until_ms: 0,
                fleet_send_rate: Some(14.0),
            }
            .metrics(),
        ),
        "outbox-sweeper" => {
            let mut run = shared::relay::SweepRun::default();
            // Known once any SES event has arrived.
            run.feedback.watermark_age_secs = Some(1.0);
            names(run.metrics())
        }
        "ses-events" => {
            let recorded = shared::notify::evidence::feedback::Recorded::Recorded { confirmed: true, suppressed: 0 };
            names(shared::notify::evidence::intake::metrics(
                &shared::notify::evidence::ses_event::Kind::Send,
                &recorded,
            ))
        }
        other => panic!("no function {other:?} emits metrics"),
    }
}

/// The dashboard's body as CloudFormation would render it.
fn dashboard() -> Value {
    let template = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../template.yaml")).unwrap();
    let start = template.find("      DashboardBody: !Sub |\n").expect("the template has a dashboard");
    let body: String = template[start..]
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("        ") || l.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    let body = body.replace("${AWS::Region}", "eu-west-1").replace("${HttpApi}", "abcdef1234");
    assert!(!body.contains("${"), "every substitution is known here");
    serde_json::from_str(&body).expect("the dashboard body is JSON")
}

#[test]
fn every_dashboard_metric_is_one_the_code_emits_and_every_panel_the_issue_asks_for_is_there() {
    let mut shown = Vec::new();
    for widget in dashboard()["widgets"].as_array().unwrap() {
        let metrics = widget["properties"]["metrics"].as_array().unwrap();
        let ids: Vec<&str> = metrics.iter().filter_map(|m| m.as_array()?.last()?.get("id")?.as_str()).collect();
        for metric in metrics {
            let parts = metric.as_array().unwrap();
            match parts[0].as_str() {
                Some("BookingOutbox") => {
                    let (name, function) = (parts[1].as_str().unwrap(), parts[3].as_str().unwrap());
                    assert_eq!(parts[2], "Function", "{metric}");
                    assert!(emitted_by(function).iter().any(|m| m == name), "{function} emits no {name}");
                    shown.push(name.to_string());
                }
                Some("AWS/ApiGateway") => {
                    let name = parts[1].as_str().unwrap();
                    assert!(["Count", "4xx", "5xx", "Latency"].contains(&name), "an HTTP API has no metric {name}");
                    assert_eq!(
                        (&parts[2], &parts[4], &parts[5]),
                        (&Value::from("ApiId"), &Value::from("Stage"), &Value::from("$default"))
                    );
                    shown.push(name.to_string());
                }
                None => {
                    let expression = parts[0]["expression"].as_str().expect("a metric or an expression");
                    for word in expression
                        .split(|c: char| !c.is_alphanumeric())
                        .filter(|w| w.chars().next().is_some_and(char::is_alphabetic))
                    {
                        assert!(ids.contains(&word), "{expression} names {word}, which no metric of its widget is");
                    }
                }
                Some(other) => panic!("a metric of namespace {other}"),
            }
        }
    }
    for wanted in [
        "Sent",
        "FleetSendRate",
        "Delivered",
        "Bounced",
        "Complained",
        // Issue 35: each ambiguous send's standing, and the watermark's age.
        "AwaitingEvidence",
        "ConfirmedBySesEvent",
        "ResentOnEvidence",
        "UnknownLeftForOperator",
        "EvidenceStalled",
        "SesEventsBehind",
        "SesWatermarkAgeSeconds",
        "DeadLettered",
        "OldestPendingAgeSeconds",
        "ClaimingSeconds",
        "Count",
        "4xx",
        "5xx",
        "Latency",
    ] {
        assert!(shown.iter().any(|s| s == wanted), "the dashboard shows no {wanted}");
    }
}
