//! CloudWatch Embedded Metric Format: metrics as one JSON line on stdout,
//! which CloudWatch Logs turns into metrics without any extra service.
//!
//! Namespace `BookingOutbox`, dimension `Function`. The alarms in
//! template.yaml use these names.

use serde_json::{json, Map, Value};

pub const NAMESPACE: &str = "BookingOutbox";

#[derive(Debug, Clone, Copy)]
pub enum Unit {
    Count,
    Seconds,
    Milliseconds,
}

impl Unit {
    fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Seconds => "Seconds",
            Unit::Milliseconds => "Milliseconds",
        }
    }
}

/// Builds one EMF record.
pub fn record(function: &str, metrics: &[(&str, f64, Unit)]) -> Value {
    let definitions: Vec<Value> =
        metrics.iter().map(|(name, _, unit)| json!({"Name": name, "Unit": unit.as_str()})).collect();
    let mut root = Map::new();
    root.insert(
        "_aws".into(),
        json!({
            "Timestamp": chrono::Utc::now().timestamp_millis(),
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [["Function"]],
                "Metrics": definitions,
            }],
        }),
    );
    root.insert("Function".into(), json!(function));
    for (name, value, _) in metrics {
        root.insert((*name).into(), json!(value));
    }
    Value::Object(root)
}

/// Prints one EMF record as its own stdout line.
pub fn emit(function: &str, metrics: &[(&str, f64, Unit)]) {
    println!("{}", record(function, metrics));
}
