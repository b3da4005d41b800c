//! The console's HTML: the page (`shared/templates/console/page.html`),
//! and the fragments its script fetches and swaps in place (overview,
//! search, timeline), each an askama template compiled with the code, every
//! value escaped. The charts are SVG drawn here from numbers alone.

use askama::Template;
use chrono::{DateTime, Utc};

use super::config::{AuthMode, ConsoleConfig};
use super::overview::{Overview, WINDOW};
use super::timeline::{self, Timeline};
use crate::booking::store::Found;
use crate::notify::sends::Minute;

/// The page: no data, only where to sign in and the script that asks.
#[derive(Template)]
#[template(path = "console/page.html")]
struct Page<'a> {
    auth: &'static str,
    sign_in: &'a str,
    client_id: &'a str,
    base: Option<&'a str>,
    /// Dev builds with `AUTH_MODE=insecure-dev-headers` only: the headers
    /// the page sends as its identity.
    dev_identity: String,
}

/// The page, answering a request for `path`: when it does not end with a
/// slash (`/console`), its relative links are resolved under it.
pub fn page(config: &ConsoleConfig, path: &str) -> String {
    let (auth, dev_identity) = match config.auth_mode {
        AuthMode::Jwt => ("cognito", String::new()),
        #[cfg(feature = "dev")]
        AuthMode::InsecureDevHeaders => (
            "dev",
            serde_json::json!({
                super::auth::DEV_EMAIL_HEADER: "operator@localhost",
                super::auth::DEV_GROUPS_HEADER: config.operators_group,
            })
            .to_string(),
        ),
    };
    let (sign_in, client_id) = match &config.sign_in {
        Some(s) => (s.endpoint.as_str(), s.client_id.as_str()),
        None => ("", ""),
    };
    let last = path.rsplit('/').next().unwrap_or_default();
    let base = (!last.is_empty()).then(|| format!("{last}/"));
    Page { auth, sign_in, client_id, base: base.as_deref(), dev_identity }.render().expect("the page renders")
}

#[derive(Template)]
#[template(path = "console/overview.html")]
struct OverviewView<'a> {
    o: &'a Overview,
    totals: Minute,
    sends_chart: String,
    latency_chart: String,
    rate: Option<f64>,
}

/// A value a template hands over however deeply borrowed.
trait Value<T: Copy> {
    fn value(&self) -> T;
}

impl Value<DateTime<Utc>> for DateTime<Utc> {
    fn value(&self) -> DateTime<Utc> {
        *self
    }
}

impl Value<f64> for f64 {
    fn value(&self) -> f64 {
        *self
    }
}

impl<T: Copy, V: Value<T> + ?Sized> Value<T> for &V {
    fn value(&self) -> T {
        (**self).value()
    }
}

/// What every fragment's template calls.
trait Helpers {
    fn now(&self) -> DateTime<Utc>;
    fn at(&self, t: impl Value<DateTime<Utc>>) -> String {
        at(&t.value())
    }
    fn secs(&self, s: impl Value<f64>) -> String {
        secs(s.value())
    }
    /// Seconds from `t` to now.
    fn age(&self, t: impl Value<DateTime<Utc>>) -> f64 {
        (self.now() - t.value()).num_milliseconds().max(0) as f64 / 1000.0
    }
    /// A string as a JSON literal inside a single-quoted attribute.
    fn json(&self, s: impl AsRef<str>) -> String {
        serde_json::to_string(s.as_ref()).expect("a string is JSON").replace('\'', "\\u0027")
    }
}

impl Helpers for OverviewView<'_> {
    fn now(&self) -> DateTime<Utc> {
        self.o.now
    }
}

impl Helpers for TimelineView<'_> {
    fn now(&self) -> DateTime<Utc> {
        self.now
    }
}

pub fn overview(o: &Overview) -> String {
    let rate = o.rates.iter().find(|r| r.provider == "ses").or(o.rates.first()).map(|r| r.rate * r.factor);
    OverviewView {
        totals: o.totals(),
        sends_chart: sends_chart(&o.minutes, o.now, rate),
        latency_chart: latency_chart(&o.minutes, o.now),
        rate,
        o,
    }
    .render()
    .expect("the overview renders")
}

#[derive(Template)]
#[template(path = "console/search.html")]
struct SearchView<'a> {
    q: &'a str,
    found: &'a [Found],
}

pub fn search(q: &str, found: &[Found]) -> String {
    SearchView { q, found }.render().expect("the search renders")
}

#[derive(Template)]
#[template(path = "console/timeline.html")]
struct TimelineView<'a> {
    t: &'a Timeline,
    now: DateTime<Utc>,
}

impl TimelineView<'_> {
    fn event_says(&self, e: &crate::outbox::events::StoredEvent) -> String {
        timeline::event_says(e, self.now)
    }
}

pub fn timeline(t: &Timeline, now: DateTime<Utc>) -> String {
    TimelineView { t, now }.render().expect("the timeline renders")
}

/// A time as the console shows it: UTC, to the second.
pub fn at(t: &DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// Seconds as a person reads them.
pub fn secs(s: f64) -> String {
    match s {
        s if s < 1.0 => format!("{:.0} ms", s * 1000.0),
        s if s < 90.0 => format!("{s:.1} s"),
        s if s < 5400.0 => format!("{:.0} min", s / 60.0),
        s => format!("{:.1} h", s / 3600.0),
    }
}

const W: f64 = 600.0;
const H: f64 = 160.0;
const LEFT: f64 = 44.0;
const BOTTOM: f64 = 20.0;

/// Which of the window's minutes `at` is (0 the oldest).
fn slot(at: DateTime<Utc>, now: DateTime<Utc>) -> Option<usize> {
    let minutes = WINDOW.as_secs() as i64 / 60;
    let back = (now - at).num_minutes();
    (0..minutes).contains(&back).then(|| (minutes - 1 - back) as usize)
}

fn frame(title: &str, desc: &str, max: f64, unit: &str, body: &str) -> String {
    let plot_h = H - BOTTOM;
    format!(
        "<svg class=\"chart\" viewBox=\"0 0 {W} {H}\" role=\"img\" aria-labelledby=\"{id}-t {id}-d\" \
         preserveAspectRatio=\"none\"><title id=\"{id}-t\">{title}</title><desc id=\"{id}-d\">{desc}</desc>\
         <line class=\"axis\" x1=\"{LEFT}\" y1=\"{plot_h}\" x2=\"{W}\" y2=\"{plot_h}\"/>\
         <line class=\"axis\" x1=\"{LEFT}\" y1=\"0\" x2=\"{LEFT}\" y2=\"{plot_h}\"/>\
         <text class=\"tick\" x=\"{tx}\" y=\"12\" text-anchor=\"end\">{max}{unit}</text>\
         <text class=\"tick\" x=\"{tx}\" y=\"{plot_h}\" text-anchor=\"end\">0</text>\
         <text class=\"tick\" x=\"{LEFT}\" y=\"{H}\">-60 min</text>\
         <text class=\"tick\" x=\"{W}\" y=\"{H}\" text-anchor=\"end\">now</text>{body}</svg>",
        id = title.split_whitespace().next().unwrap_or("c").to_lowercase(),
        tx = LEFT - 4.0,
        max = trim(max),
    )
}

fn trim(v: f64) -> String {
    if v >= 10.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Sends a second, each minute of the last hour, as bars; the fleet's rate
/// now as a dashed line.
pub fn sends_chart(minutes: &[Minute], now: DateTime<Utc>, rate: Option<f64>) -> String {
    let slots = WINDOW.as_secs() as f64 / 60.0;
    let per_sec: Vec<(usize, f64)> =
        minutes.iter().filter_map(|m| slot(m.at, now).map(|i| (i, m.sent as f64 / 60.0))).collect();
    let peak = per_sec.iter().map(|p| p.1).fold(rate.unwrap_or(0.0), f64::max);
    let max = nice(peak.max(1.0));
    let (plot_w, plot_h) = (W - LEFT, H - BOTTOM);
    let bar = plot_w / slots;
    let mut body = String::new();
    for (i, v) in &per_sec {
        // A minute that sent anything shows, however small beside the rate.
        let h = (v / max * plot_h).max(2.0);
        body += &format!(
            "<rect class=\"bar\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\"/>",
            LEFT + *i as f64 * bar + 0.5,
            plot_h - h,
            (bar - 1.0).max(0.5)
        );
    }
    if let Some(rate) = rate {
        let y = plot_h - rate / max * plot_h;
        body += &format!(
            "<line class=\"limit\" x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{W}\" y2=\"{y:.1}\"/>\
             <text class=\"tick\" x=\"{:.0}\" y=\"{:.1}\" text-anchor=\"end\">rate {}/s</text>",
            W - 4.0,
            (y - 4.0).max(10.0),
            trim(rate)
        );
    }
    let desc = format!(
        "Sends accepted a second, each minute of the last hour; peak {}/s{}.",
        trim(per_sec.iter().map(|p| p.1).fold(0.0, f64::max)),
        rate.map(|r| format!(", against the fleet's rate of {}/s", trim(r))).unwrap_or_default()
    );
    frame("Sends per second", &desc, max, "/s", &body)
}

/// Commit → send latency each minute: the median and the 99th percentile.
pub fn latency_chart(minutes: &[Minute], now: DateTime<Utc>) -> String {
    let slots = WINDOW.as_secs() as f64 / 60.0;
    let points = |f: fn(&Minute) -> Option<f64>| -> Vec<(usize, f64)> {
        minutes.iter().filter_map(|m| Some((slot(m.at, now)?, f(m)?))).collect()
    };
    let (p50, p99) = (points(|m| m.latency_p50), points(|m| m.latency_p99));
    let max = nice(p99.iter().chain(&p50).map(|p| p.1).fold(0.1, f64::max));
    let (plot_w, plot_h) = (W - LEFT, H - BOTTOM);
    let step = plot_w / slots;
    let line = |pts: &[(usize, f64)], class: &str| -> String {
        if pts.is_empty() {
            return String::new();
        }
        let coords: Vec<String> = pts
            .iter()
            .map(|(i, v)| format!("{:.1},{:.1}", LEFT + (*i as f64 + 0.5) * step, plot_h - v / max * plot_h))
            .collect();
        let dots: String = coords
            .iter()
            .map(|c| {
                let (x, y) = c.split_once(',').expect("x,y");
                format!("<circle class=\"{class}\" cx=\"{x}\" cy=\"{y}\" r=\"2\"/>")
            })
            .collect();
        format!("<polyline class=\"{class}\" points=\"{}\"/>{dots}", coords.join(" "))
    };
    let body = format!("{}{}", line(&p99, "p99"), line(&p50, "p50"));
    let worst = p99.iter().map(|p| p.1).fold(0.0, f64::max);
    let desc = format!("Commit to send latency each minute of the last hour; worst p99 {}.", secs(worst));
    frame("Latency commit to send", &desc, max, " s", &body)
}

/// A round upper bound for an axis: 1, 2 or 5 times a power of ten.
fn nice(v: f64) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * p).find(|c| *c >= v).unwrap_or(10.0 * p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_axis_ends_at_a_round_number() {
        assert_eq!(nice(14.0), 20.0);
        assert_eq!(nice(0.3), 0.5);
        assert_eq!(nice(100.0), 100.0);
        assert_eq!(nice(101.0), 200.0);
    }

    #[test]
    fn a_minute_outside_the_window_is_not_drawn() {
        let now = Utc::now();
        assert_eq!(slot(now, now), Some(59));
        assert_eq!(slot(now - chrono::Duration::minutes(59), now), Some(0));
        assert_eq!(slot(now - chrono::Duration::minutes(60), now), None);
    }
}
