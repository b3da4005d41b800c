//! An in-process span exporter for the tests: a `tracing` layer that keeps
//! every span's name and fields, installed for the current thread (the
//! tests' runtime runs every task there).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// One span: its name and its fields (recorded later ones included).
#[derive(Debug, Clone)]
pub struct Span {
    pub name: String,
    pub fields: BTreeMap<String, String>,
}

#[derive(Clone, Default)]
pub struct Exported(Arc<Mutex<Vec<(Id, Span)>>>);

impl Exported {
    /// The spans named `name`, in the order they opened.
    pub fn named(&self, name: &str) -> Vec<Span> {
        self.0.lock().unwrap().iter().filter(|(_, s)| s.name == name).map(|(_, s)| s.clone()).collect()
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_string(), format!("{value:?}"));
    }
}

struct Exporter(Exported);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Exporter {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        self.0 .0.lock().unwrap().push((id.clone(), Span { name: attrs.metadata().name().to_string(), fields }));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some((_, span)) = self.0 .0.lock().unwrap().iter_mut().rev().find(|(i, _)| i == id) {
            values.record(&mut Fields(&mut span.fields));
        }
    }
}

/// A second dispatcher that lives as long as the process. With one live
/// dispatcher, `tracing` computes a callsite's interest from the default of
/// whichever thread reaches it first, so a test thread without a subscriber
/// that opens a span first (another test's poller) caches it as never
/// wanted, and this thread's exporter never sees it. With two, every
/// callsite asks every live dispatcher, this one included.
static EVERY_CALLSITE_ASKS_EVERY_DISPATCHER: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();

/// Exports every span opened on this thread until the guard drops.
pub fn export() -> (Exported, tracing::subscriber::DefaultGuard) {
    EVERY_CALLSITE_ASKS_EVERY_DISPATCHER.get_or_init(|| tracing::Dispatch::new(tracing_subscriber::registry()));
    let exported = Exported::default();
    let subscriber = tracing_subscriber::registry().with(Exporter(exported.clone()));
    (exported, tracing::subscriber::set_default(subscriber))
}
