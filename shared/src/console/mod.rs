//! The operator console: one page, served by the project's own function
//! locally (`make dev`) and deployed (behind the stack's user pool, for
//! its operators group only), that shows how the outbox stands and what
//! became of each booking's mail, and does what `outboxctl` does.
//!
//! | route | what it answers |
//! |---|---|
//! | `GET /` | the page (no data: its script signs in, then asks for each view) |
//! | `GET /assets/console.js`, `/assets/console.css` | the page's script and styles, compiled into the binary |
//! | `GET /api/overview` | the overview (HTML fragment) |
//! | `POST /api/search` `{"q": …}` | bookings by id, organizer or attendee address (in the body: no address in a URL) |
//! | `GET /api/bookings/{id}` | a booking's timeline |
//! | `GET /api/sends/{id}/message/{html,text,ics}` | a sent message's part, as its recipient saw it ([`message`]) |
//! | `POST /api/actions/preview`, `POST /api/actions/run` `{"action": …}` | what an action would do; do it ([`actions`]) |
//!
//! Every `/api/` route answers only an operator ([`auth`]); anyone else
//! gets a problem+json 401 or 403 with nothing of the outbox in it. The
//! console sits at the top of the library beside `relay` and `api`:
//! nothing imports it, and it reads every table through its owner.

pub mod actions;
pub mod auth;
pub mod config;
pub mod message;
pub mod overview;
pub mod timeline;
pub mod view;

use deadpool_postgres::Pool;
use lambda_http::http::{header, HeaderValue, Method, StatusCode};
use lambda_http::{Body, Request, Response};
use serde::Deserialize;
use uuid::Uuid;

use crate::booking::store::{self, Search};
use actions::{Action, Said};
use auth::Refused;
use config::ConsoleConfig;

const SCRIPT: &str = include_str!("../../console/console.js");
const STYLES: &str = include_str!("../../console/console.css");

/// The longest request body the console reads.
const MAX_BODY: usize = 4096;

pub struct Console {
    pool: Pool,
    config: ConsoleConfig,
    minutes: overview::Minutes,
}

/// Where a request goes.
enum Route {
    Page,
    Script,
    Styles,
    Overview,
    Search,
    Booking(Uuid),
    Message(Uuid, message::Part),
    Preview,
    Run,
}

impl Route {
    /// The route of `path` and the method it takes. A deployed console
    /// lives under `/console/` of the stack's API; locally at the root.
    fn of(method: &Method, path: &str) -> Option<Result<Route, &'static str>> {
        let path = path.strip_prefix("/console").filter(|p| p.is_empty() || p.starts_with('/')).unwrap_or(path);
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (route, allowed) = match segments.as_slice() {
            [""] => (Route::Page, "GET"),
            ["assets", "console.js"] => (Route::Script, "GET"),
            ["assets", "console.css"] => (Route::Styles, "GET"),
            ["api", "overview"] => (Route::Overview, "GET"),
            ["api", "search"] => (Route::Search, "POST"),
            ["api", "bookings", id] => (Route::Booking(Uuid::parse_str(id).ok()?), "GET"),
            ["api", "sends", id, "message", part] => {
                (Route::Message(Uuid::parse_str(id).ok()?, message::Part::parse(part)?), "GET")
            }
            ["api", "actions", "preview"] => (Route::Preview, "POST"),
            ["api", "actions", "run"] => (Route::Run, "POST"),
            _ => return None,
        };
        Some(if method.as_str() == allowed || (allowed == "GET" && method == Method::HEAD) {
            Ok(route)
        } else {
            Err(allowed)
        })
    }
}

/// A problem+json answer: its status, title and detail, nothing else.
fn problem(status: StatusCode, title: &str, detail: &str) -> Response<Body> {
    let body = serde_json::json!({"type": "about:blank", "title": title, "status": status.as_u16(), "detail": detail});
    respond(status, "application/problem+json", body.to_string())
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Body> {
    let mut r = Response::new(Body::Text(body));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_str(content_type).expect("a content type"));
    // Nothing an operator sees is cached, framed by another site or sniffed.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    r
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Query {
    q: String,
}

impl Console {
    pub fn new(pool: Pool, config: ConsoleConfig) -> Self {
        Self { pool, config, minutes: Default::default() }
    }

    /// Answers one request; never panics, never a 500 for bad input.
    pub async fn handle(&self, req: Request) -> Response<Body> {
        let route = match Route::of(req.method(), req.uri().path()) {
            None => return problem(StatusCode::NOT_FOUND, "Not found", "no such page of the console"),
            Some(Err(allowed)) => {
                let mut r = problem(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed", "see Allow");
                r.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allowed));
                return r;
            }
            Some(Ok(route)) => route,
        };
        match route {
            Route::Page => return self.page(req.uri().path()),
            Route::Script => return respond(StatusCode::OK, "text/javascript; charset=utf-8", SCRIPT.into()),
            Route::Styles => return respond(StatusCode::OK, "text/css; charset=utf-8", STYLES.into()),
            _ => {}
        }
        let operator = match auth::operator(&req, &self.config) {
            Ok(o) => o,
            Err(Refused::NotSignedIn(why)) => {
                return problem(StatusCode::UNAUTHORIZED, "Not signed in", &format!("sign in as an operator ({why})"))
            }
            Err(Refused::NotAnOperator) => {
                return problem(
                    StatusCode::FORBIDDEN,
                    "Not an operator",
                    &format!("only members of the {} group may use the console", self.config.operators_group),
                )
            }
        };
        let body: &[u8] = req.body().as_ref();
        if matches!(route, Route::Search | Route::Preview | Route::Run) {
            if !auth::same_origin_json(&req) {
                return problem(
                    StatusCode::FORBIDDEN,
                    "Refused",
                    "a change must be JSON from the console's own page (Content-Type: application/json, same origin)",
                );
            }
            if body.len() > MAX_BODY {
                return problem(StatusCode::PAYLOAD_TOO_LARGE, "Too large", "the body is over 4 KiB");
            }
        }
        match self.answer(route, body, &operator).await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "the console could not answer");
                if e.is_transient() {
                    problem(StatusCode::SERVICE_UNAVAILABLE, "Unavailable", "the database is unavailable; try again")
                } else {
                    problem(StatusCode::INTERNAL_SERVER_ERROR, "Failed", "the console could not answer; see its log")
                }
            }
        }
    }

    fn page(&self, path: &str) -> Response<Body> {
        let mut r = respond(StatusCode::OK, "text/html; charset=utf-8", view::page(&self.config, path));
        let connect = self.config.sign_in.as_ref().map(|s| format!(" {}", s.endpoint)).unwrap_or_default();
        let csp = format!(
            "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
             connect-src 'self'{connect}; frame-src 'self'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'"
        );
        r.headers_mut().insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_str(&csp).expect("ASCII"));
        r
    }

    async fn answer(
        &self,
        route: Route,
        body: &[u8],
        operator: &auth::Operator,
    ) -> Result<Response<Body>, crate::db::DbError> {
        let html = |s: String| respond(StatusCode::OK, "text/html; charset=utf-8", s);
        let mut client = self.pool.get().await.map_err(crate::db::DbError::from)?;
        Ok(match route {
            Route::Overview => {
                html(view::overview(&overview::Overview::fetch(&client, &self.config.sweeper, &self.minutes).await?))
            }
            Route::Search => {
                let Ok(Query { q }) = serde_json::from_slice::<Query>(body) else {
                    return Ok(problem(StatusCode::BAD_REQUEST, "Bad search", "send {\"q\": \"…\"}"));
                };
                let q = q.trim();
                let search = match Uuid::parse_str(q) {
                    Ok(id) => Search::Id(id),
                    Err(_) if q.contains('@') && q.len() <= 320 => Search::Address(q),
                    Err(_) => {
                        return Ok(problem(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            "Bad search",
                            "search by a booking's id or an exact email address",
                        ))
                    }
                };
                let found = store::find(&client, search, 50).await.map_err(booking_error)?;
                html(view::search(q, &found))
            }
            Route::Booking(id) => match timeline::Timeline::fetch(&client, id).await.map_err(booking_error)? {
                Some(t) => {
                    let now = client.query_one("SELECT now()", &[]).await?.get(0);
                    html(view::timeline(&t, now))
                }
                None => {
                    problem(StatusCode::NOT_FOUND, "Not found", "no booking with this id (or retention deleted it)")
                }
            },
            Route::Message(send, part) => match message::of_send(&client, send, part).await? {
                // Shown in a sandboxed frame: no script may run, nothing is fetched.
                Some(body) => {
                    let mut r = respond(StatusCode::OK, part.content_type(), body);
                    r.headers_mut().insert(
                        header::CONTENT_SECURITY_POLICY,
                        HeaderValue::from_static("sandbox; default-src 'none'; style-src 'unsafe-inline'"),
                    );
                    r
                }
                None => problem(StatusCode::NOT_FOUND, "Not found", "no such send, or its event is gone"),
            },
            Route::Preview | Route::Run => {
                let action = match Action::parse(body) {
                    Ok(a) => a,
                    Err(e) => return Ok(problem(StatusCode::UNPROCESSABLE_ENTITY, "Bad action", &e)),
                };
                let said = match route {
                    Route::Preview => action.preview(&mut client).await?,
                    _ => action.run(&mut client, operator).await?,
                };
                let (ok, text) = match said {
                    Said::Ok(t) => (true, t),
                    Said::Refused(t) => (false, t),
                };
                respond(StatusCode::OK, "application/json", serde_json::json!({"ok": ok, "text": text}).to_string())
            }
            Route::Page | Route::Script | Route::Styles => unreachable!("answered before the identity check"),
        })
    }
}

fn booking_error(e: crate::booking::BookingError) -> crate::db::DbError {
    match e {
        crate::booking::BookingError::Db(e) => e,
        other => crate::db::DbError::Corrupt(other.to_string()),
    }
}
