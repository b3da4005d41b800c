// The operator console's script (shared/src/console): signs the operator
// in, then fetches each view as an HTML fragment and swaps it in place,
// refreshing it without a reload. No build step, no dependency.
//
// Sign-in (deployed): the user pool's managed login, authorization code
// with PKCE; the ID token stays in this tab's sessionStorage and goes in
// the Authorization header of each request, never in a URL or a cookie.
// Locally (`make dev`, AUTH_MODE=insecure-dev-headers): the dev identity
// headers, as the operator `operator@localhost` in the operators group.
"use strict";

const body = document.body;
const auth = body.dataset.auth;
const base = location.pathname.endsWith("/") ? location.pathname : location.pathname + "/";
const view = document.getElementById("view");
const status = document.getElementById("status");
const TOKEN = "outbox-console-id-token";
const VERIFIER = "outbox-console-pkce";

function b64url(bytes) {
  return btoa(String.fromCharCode(...new Uint8Array(bytes))).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

async function signIn() {
  const verifier = b64url(crypto.getRandomValues(new Uint8Array(32)));
  const state = b64url(crypto.getRandomValues(new Uint8Array(16)));
  sessionStorage.setItem(VERIFIER, JSON.stringify({ verifier, state }));
  const challenge = b64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  const q = new URLSearchParams({
    response_type: "code", client_id: body.dataset.clientId, redirect_uri: location.origin + base,
    scope: "openid email", state, code_challenge: challenge, code_challenge_method: "S256",
  });
  location.assign(body.dataset.loginUrl + "/oauth2/authorize?" + q);
}

// Back from the managed login with ?code=…&state=…: trade the code for
// tokens, then drop them from the address bar.
async function finishSignIn() {
  const q = new URLSearchParams(location.search);
  if (!q.has("code")) return;
  const saved = JSON.parse(sessionStorage.getItem(VERIFIER) || "{}");
  sessionStorage.removeItem(VERIFIER);
  history.replaceState(null, "", base + location.hash);
  if (!saved.verifier || saved.state !== q.get("state")) throw new Error("the sign-in came back with a state this tab did not send");
  const r = await fetch(body.dataset.loginUrl + "/oauth2/token", {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code", client_id: body.dataset.clientId, code: q.get("code"),
      redirect_uri: location.origin + base, code_verifier: saved.verifier,
    }),
  });
  if (!r.ok) throw new Error("the sign-in failed (" + r.status + ")");
  sessionStorage.setItem(TOKEN, (await r.json()).id_token);
}

function headers(extra) {
  const h = Object.assign({}, extra);
  if (auth === "dev") {
    h["x-dev-user-email"] = localStorage.getItem("outbox-console-dev-user") || "operator@localhost";
    h["x-dev-user-groups"] = localStorage.getItem("outbox-console-dev-groups") ?? "operators";
  } else {
    const token = sessionStorage.getItem(TOKEN);
    if (token) h.authorization = "Bearer " + token;
  }
  return h;
}

class Refusal extends Error {}

async function api(path, json) {
  const init = json === undefined
    ? { headers: headers() }
    : { method: "POST", headers: headers({ "content-type": "application/json" }), body: JSON.stringify(json) };
  const r = await fetch(base + "api/" + path, init);
  if (r.status === 401 && auth !== "dev") { sessionStorage.removeItem(TOKEN); await signIn(); throw new Refusal("signing in"); }
  if (!r.ok) {
    let detail = r.statusText;
    try { detail = (await r.json()).detail || detail; } catch (_) { /* not JSON */ }
    throw new Refusal(r.status + ": " + detail);
  }
  return (r.headers.get("content-type") || "").startsWith("application/json") ? r.json() : r.text();
}

function say(text) { status.textContent = text; }

// Swaps a fragment in, keeping the keyboard's place: the focused
// element, found again by its id or its action, keeps the focus.
function show(html) {
  if (view.dataset.html === html) return;
  const active = document.activeElement;
  const key = active && view.contains(active) ? (active.id ? "#" + CSS.escape(active.id)
    : active.dataset.action ? "[data-action='" + active.dataset.action.replace(/'/g, "\\'") + "']" : null) : null;
  view.innerHTML = html;
  view.dataset.html = html;
  if (key) { const again = view.querySelector(key); if (again) again.focus(); }
}

let timer = null;
let route = null;

async function refresh() {
  clearTimeout(timer);
  const here = route;
  try {
    if (here.kind === "overview") show(await api("overview"));
    else if (here.kind === "booking") show(await api("bookings/" + here.id));
    else if (here.kind === "search") show(await api("search", { q: here.q }));
    say("");
  } catch (e) {
    if (!(e instanceof Refusal && e.message === "signing in")) say(e.message);
    if (e instanceof Refusal && /^40[13]/.test(e.message)) {
      show("<section><h2>No access</h2><p>" + e.message.replace(/[<&]/g, "") + "</p></section>");
      return;
    }
  }
  if (here === route && here.every) timer = setTimeout(refresh, here.every);
}

function go() {
  const m = location.hash.match(/^#\/bookings\/([0-9a-f-]{36})$/i);
  if (m) route = { kind: "booking", id: m[1], every: 2000 };
  else if (location.hash === "#/search" && route && route.kind === "search") return;
  else route = { kind: "overview", every: 5000 };
  view.dataset.html = "";
  refresh().then(() => view.focus({ preventScroll: true }));
}

document.getElementById("search").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const q = document.getElementById("q").value.trim();
  if (!q) return;
  // The address stays out of the URL: the search is a POST.
  route = { kind: "search", q, every: 0 };
  if (/^[0-9a-f-]{36}$/i.test(q)) { location.hash = "#/bookings/" + q; return; }
  history.pushState(null, "", base + "#/search");
  refresh();
});

// An action: what it will do, confirmed, then done.
const dialog = document.getElementById("confirm");
view.addEventListener("click", async (ev) => {
  const button = ev.target.closest("button[data-action]");
  if (!button) return;
  const action = JSON.parse(button.dataset.action);
  try {
    const preview = await api("actions/preview", action);
    document.getElementById("confirm-text").textContent = preview.text;
    document.getElementById("confirm-ok").hidden = !preview.ok;
    dialog.returnValue = "";
    dialog.showModal();
    dialog.addEventListener("close", async () => {
      if (dialog.returnValue !== "ok") { button.focus(); return; }
      try {
        const done = await api("actions/run", action);
        say(done.text);
      } catch (e) { say(e.message); }
      refresh();
    }, { once: true });
  } catch (e) { say(e.message); }
});

window.addEventListener("hashchange", go);
window.addEventListener("popstate", go);

(async () => {
  try {
    if (auth !== "dev") {
      await finishSignIn();
      if (!sessionStorage.getItem(TOKEN)) { await signIn(); return; }
    }
    document.getElementById("who").textContent = auth === "dev" ? "local operator (make dev)" : "";
    go();
  } catch (e) { say(e.message); }
})();
