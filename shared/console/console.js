// The operator console's script (shared/src/console): signs the operator
// in, then fetches each view as an HTML fragment and swaps it in place,
// refreshing it without a reload. No build step, no dependency.
//
// Sign-in (deployed): the page's own form posts the operator's address and
// password to Cognito (InitiateAuth, USER_PASSWORD_AUTH, over TLS; never to
// this service), answers its challenges (a new password, an MFA code), and
// keeps the ID token in this tab's sessionStorage. Each request carries it
// in the Authorization header: never in a URL, never in a cookie.
// Locally (`make dev`, AUTH_MODE=insecure-dev-headers): the dev identity
// headers the page names, as `operator@localhost` in the operators group.
"use strict";

const body = document.body;
const auth = body.dataset.auth;
const base = location.pathname.endsWith("/") ? location.pathname : location.pathname + "/";
const view = document.getElementById("view");
const status = document.getElementById("status");
const TOKEN = "outbox-console-id-token";

async function cognito(target, payload) {
  const r = await fetch(body.dataset.signIn, {
    method: "POST",
    headers: { "content-type": "application/x-amz-json-1.1", "x-amz-target": "AWSCognitoIdentityProviderService." + target },
    body: JSON.stringify(payload),
  });
  const answer = await r.json().catch(() => ({}));
  if (!r.ok) throw new Refusal((answer.message || answer.__type || r.statusText).toString());
  return answer;
}

// With the stack's own user pool: the sign-in form, until Cognito hands
// over an ID token. With your own provider (no pool to sign in to): an ID
// token of it, pasted in.
function signIn() {
  if (!body.dataset.signIn) {
    return new Promise((resolve) => {
      const form = document.getElementById("token-in");
      form.hidden = false;
      view.innerHTML = "";
      document.getElementById("token").focus();
      form.onsubmit = (ev) => {
        ev.preventDefault();
        sessionStorage.setItem(TOKEN, document.getElementById("token").value.trim());
        form.hidden = true;
        resolve();
      };
    });
  }
  return new Promise((resolve) => {
    const form = document.getElementById("sign-in");
    const extra = document.getElementById("sign-in-extra");
    const label = document.getElementById("sign-in-extra-label");
    let pending = null;
    form.hidden = false;
    view.innerHTML = "";
    document.getElementById("sign-in-email").focus();
    form.onsubmit = async (ev) => {
      ev.preventDefault();
      const email = document.getElementById("sign-in-email").value.trim();
      try {
        let a;
        if (!pending) {
          a = await cognito("InitiateAuth", { AuthFlow: "USER_PASSWORD_AUTH", ClientId: body.dataset.clientId,
            AuthParameters: { USERNAME: email, PASSWORD: document.getElementById("sign-in-password").value } });
        } else {
          const responses = { USERNAME: pending.user };
          if (pending.name === "NEW_PASSWORD_REQUIRED") responses.NEW_PASSWORD = extra.value;
          else responses.SOFTWARE_TOKEN_MFA_CODE = extra.value;
          a = await cognito("RespondToAuthChallenge", { ClientId: body.dataset.clientId, ChallengeName: pending.name,
            Session: pending.session, ChallengeResponses: responses });
        }
        if (a.AuthenticationResult) {
          sessionStorage.setItem(TOKEN, a.AuthenticationResult.IdToken);
          form.hidden = true;
          say("");
          resolve();
          return;
        }
        if (a.ChallengeName !== "NEW_PASSWORD_REQUIRED" && a.ChallengeName !== "SOFTWARE_TOKEN_MFA") {
          throw new Refusal("Cognito asks for " + a.ChallengeName + ", which this page cannot answer");
        }
        pending = { name: a.ChallengeName, session: a.Session, user: (a.ChallengeParameters || {}).USER_ID_FOR_SRP || email };
        label.textContent = a.ChallengeName === "NEW_PASSWORD_REQUIRED" ? "Choose a new password" : "Code from your authenticator app";
        extra.type = a.ChallengeName === "NEW_PASSWORD_REQUIRED" ? "password" : "text";
        extra.parentElement.hidden = false;
        extra.value = "";
        extra.focus();
      } catch (e) { say(e.message); }
    };
  });
}

class Refusal extends Error {}

function headers(extra) {
  const h = Object.assign({}, extra);
  if (auth === "dev") {
    // The identity a dev build names in the page (a release build has none).
    Object.assign(h, JSON.parse(body.dataset.devIdentity || "{}"));
  } else {
    const token = sessionStorage.getItem(TOKEN);
    if (token) h.authorization = "Bearer " + token;
  }
  return h;
}

async function api(path, json) {
  const init = json === undefined
    ? { headers: headers() }
    : { method: "POST", headers: headers({ "content-type": "application/json" }), body: JSON.stringify(json) };
  const r = await fetch(base + "api/" + path, init);
  if (r.status === 401 && auth !== "dev") { sessionStorage.removeItem(TOKEN); await signIn(); return api(path, json); }
  if (!r.ok) {
    let detail = r.statusText;
    try { detail = (await r.json()).detail || detail; } catch (_) { /* not JSON */ }
    throw new Refusal(r.status + ": " + detail);
  }
  return (r.headers.get("content-type") || "").startsWith("application/json") ? r.json() : r.text();
}

// A line in the status bar. An action's result stays until the operator
// moves elsewhere; a failed refresh's says until one succeeds.
function say(text, sticky) {
  status.textContent = text;
  status.dataset.sticky = sticky ? "1" : "";
}

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
    if (!status.dataset.sticky) say("");
  } catch (e) {
    say(e.message);
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
  say("");
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
        say(done.text, true);
      } catch (e) { say(e.message); }
      refresh();
    }, { once: true });
  } catch (e) { say(e.message); }
});

// A sent message's part, as its recipient saw it: the HTML in a sandboxed
// frame (no script, nothing fetched), the text and calendar parts as text.
const message = document.getElementById("message");
view.addEventListener("click", async (ev) => {
  const button = ev.target.closest("button[data-message]");
  if (!button) return;
  try {
    const r = await fetch(base + "api/sends/" + button.dataset.message.replace(/\/(\w+)$/, "/message/$1"), { headers: headers() });
    if (!r.ok) throw new Refusal(r.status + ": " + ((await r.json().catch(() => ({}))).detail || r.statusText));
    const text = await r.text();
    const html = button.dataset.message.endsWith("/html");
    const frame = document.getElementById("message-html");
    const pre = document.getElementById("message-text");
    frame.hidden = !html; pre.hidden = html;
    if (html) frame.srcdoc = text; else pre.textContent = text;
    const label = button.getAttribute("aria-label");
    document.getElementById("message-title").textContent = label.charAt(0).toUpperCase() + label.slice(1);
    message.showModal();
    message.addEventListener("close", () => button.focus(), { once: true });
  } catch (e) { say(e.message); }
});

window.addEventListener("hashchange", go);
window.addEventListener("popstate", go);

(async () => {
  try {
    if (auth !== "dev" && !sessionStorage.getItem(TOKEN)) await signIn();
    if (auth === "dev") {
      document.getElementById("who").textContent = "local operator (make dev)";
    } else {
      const out = document.getElementById("sign-out");
      out.hidden = false;
      out.onclick = () => { sessionStorage.removeItem(TOKEN); location.reload(); };
    }
    go();
  } catch (e) { say(e.message); }
})();
