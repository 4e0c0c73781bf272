// The embed chat page: exchanges ?sessionId= for a token (kept in
// sessionStorage), loads the user, streams chat answers as NDJSON and
// renders them, stops and rejoins turns, and tells the parent window when
// the session has expired.
import { renderMarkdown } from "./markdown.js";
import { renderTool, setDownload } from "./render.js";

// Each embed of a tab (a frame) keeps its token and chat under a slot of
// its own: a random id in the page's URL fragment (#ek=...), which a
// reload keeps and a new session replaces. Frames of one origin in one tab
// share sessionStorage; without slots, a reloaded frame would take the
// token (and so the user) the last other frame stored.
let slot = "";
const tokenKey = () => "embedkit.token." + slot;
const expiresKey = () => "embedkit.tokenExpiresAt." + slot;
const chatKeyOf = (s) => "embedkit.chat." + s;
const CHAT_PREFIX = "embedkit.chat.";
// maxChats bounds the chats kept in the tab's storage (the oldest go), as
// a host that mints a session on every load leaves one behind each time.
const maxChats = 8;

const $ = (id) => document.getElementById(id);
const body = document.body;
const log = $("ek-log");
const form = $("ek-form");
const input = $("ek-input");
const send = $("ek-send");
const stop = $("ek-stop");
const newChat = $("ek-new");
const notice = $("ek-notice");

let token = "";
let me = null;
let busy = false;
let ended = false; // the session expired
// streamOpen: the server answered the stream's request (the turn is its).
// stopPending: Stop was pressed before that; the abort goes once it opens.
let streamOpen = false;
let stopPending = false;
// chat is what a reload needs: the thread, the highest sort applied and
// the messages as merged so far. It is saved to sessionStorage as one
// value, so that lastSort always matches the messages.
let chat = { chatId: "", lastSort: 0, msgs: {} };
const views = new Map(); // message id -> { el, sig }

// storage is sessionStorage, or a map for this page's life where the
// browser refuses storage to the frame (then a reload needs a new session).
const storage = (() => {
  try {
    const s = window.sessionStorage;
    s.setItem("embedkit.probe", "1");
    s.removeItem("embedkit.probe");
    return {
      getItem: (k) => s.getItem(k), setItem: (k, v) => s.setItem(k, v), removeItem: (k) => s.removeItem(k),
      keys: () => Array.from({ length: s.length }, (_, i) => s.key(i)),
    };
  } catch (_) {
    const m = new Map();
    return {
      getItem: (k) => m.get(k) ?? null, setItem: (k, v) => m.set(k, String(v)), removeItem: (k) => m.delete(k),
      keys: () => [...m.keys()],
    };
  }
})();

// newChatId returns a random UUID, or chat-<timestamp>-<random> where
// crypto.randomUUID is missing (pages not served over HTTPS).
function newChatId() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const r = crypto.getRandomValues(new Uint32Array(2));
  return "chat-" + Date.now() + "-" + r[0].toString(36) + r[1].toString(36);
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function show(text, kind) {
  notice.textContent = text;
  notice.className = "ek-notice" + (kind ? " ek-" + kind : "");
  notice.hidden = !text;
}

// ----- session -----

// sessionExpired ends the page's session: the token expired or was
// refused, or (why) there is none.
function sessionExpired(why) {
  if (ended) return;
  ended = true;
  token = "";
  storage.removeItem(tokenKey());
  storage.removeItem(expiresKey());
  setBusy(false);
  input.disabled = send.disabled = newChat.disabled = true;
  show(why || "Your session has expired. Open the chat again from the application to continue.", "error");
  postExpired();
}

// postExpired tells the host page that this page needs a new session.
function postExpired() {
  if (window.parent !== window) {
    // The message holds no secret, and the page cannot know its host's
    // origin: any parent may read it.
    window.parent.postMessage({ type: "embedkit:session-expired" }, "*");
  }
}

function watchExpiry(at) {
  const ms = Date.parse(at) - Date.now();
  if (Number.isNaN(ms)) return;
  if (ms <= 0) return sessionExpired();
  if (ms < 2 ** 31 - 1) setTimeout(sessionExpired, ms);
}


// exchange trades the embed URL's sessionId for a token. It returns ""
// or why it failed, and sets refused when the server refused the
// sessionId (invalid, expired or already used). Either way the earlier
// session's token is gone first: a new sessionId may be another user's,
// and a failed one must never leave the page signed in as the earlier
// user.
let refused = false;
async function exchange(sessionId) {
  let res;
  try {
    res = await fetch(body.dataset.tokenUrl, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ sessionId }),
      credentials: "omit",
      cache: "no-store",
    });
  } catch (_) {
    return "the connection failed";
  }
  if (!res.ok) {
    refused = res.status === 401;
    return await errorText(res);
  }
  let t;
  try {
    t = await res.json();
  } catch (_) {
    return "the answer was not JSON";
  }
  if (!t || typeof t.token !== "string" || t.token === "") return "the answer held no token";
  token = t.token;
  storage.setItem(tokenKey(), t.token);
  storage.setItem(expiresKey(), t.expiresAt);
  return "";
}

// exchangeFailed shows why the chat link did not open; the page stays
// signed out. A refused sessionId (a page reloaded from the cache with a
// spent one, say) needs a new session, as an expired token does.
function exchangeFailed(why) {
  ended = true;
  setBusy(false);
  input.disabled = send.disabled = newChat.disabled = true;
  show("This chat link could not be opened (" + why + "). Open the chat again from the application.", "error");
  body.dataset.exchange = "failed";
  if (refused) postExpired();
}

function api(url, init = {}) {
  return fetch(url, {
    ...init,
    headers: { ...(init.headers || {}), Authorization: "Bearer " + token },
    credentials: "omit",
    cache: "no-store",
  });
}

async function errorText(res) {
  try {
    const j = await res.json();
    if (j && typeof j.error === "string") return j.error;
  } catch (_) { /* not JSON */ }
  return "HTTP " + res.status;
}

// ----- rendering -----

function renderAvatar() {
  $("ek-name").textContent = me.displayName;
  const initials = $("ek-initials");
  initials.textContent = me.initials;
  const avatar = $("ek-avatar");
  avatar.title = me.displayName;
  if (!me.picture) return;
  const img = new Image();
  img.className = "ek-avatar-img";
  img.alt = "";
  img.referrerPolicy = "no-referrer";
  img.hidden = true;
  img.addEventListener("load", () => {
    img.hidden = false;
    initials.hidden = true;
  });
  img.addEventListener("error", () => img.remove());
  img.src = me.picture;
  avatar.append(img);
}

// place puts a message's node in sort order. A message is ordered by the
// sort of its latest line, so the text written after tool calls shows
// below them.
function place(id, node, ord) {
  node.dataset.order = String(ord);
  for (const child of log.children) {
    if (child !== node && Number(child.dataset.order) > ord) {
      log.insertBefore(node, child);
      return;
    }
  }
  log.append(node);
}

function signature(m) {
  try {
    return JSON.stringify([m.content, m.isInProcess, m.toolCall?.input, m.toolCall?.result]);
  } catch (_) {
    return String(Math.random()); // drawn again; renderMessage says what it can
  }
}

// Messages are drawn again at most once a frame, and, when drawing takes
// long (a very long message streams in, and each delta redraws all of
// it), with at least twice the time the last drawing took free before the
// next: the page keeps most of its time for the user whatever the
// message.
let pending = new Set();
let frame = 0; // a requestAnimationFrame id, or
let timer = 0; // a setTimeout id before one
let notBefore = 0;

function schedule(id) {
  pending.add(id);
  if (frame || timer) return;
  const wait = notBefore - performance.now();
  if (wait > 0) {
    timer = setTimeout(() => {
      timer = 0;
      frame = requestAnimationFrame(flushRender);
    }, wait);
  } else {
    frame = requestAnimationFrame(flushRender);
  }
}

// flushRender draws the pending messages now.
function flushRender() {
  if (frame) cancelAnimationFrame(frame);
  if (timer) clearTimeout(timer);
  frame = timer = 0;
  const ids = pending;
  pending = new Set();
  const t0 = performance.now();
  for (const id of ids) renderMessage(chat.msgs[id]);
  const took = performance.now() - t0;
  notBefore = t0 + took + 2 * took;
}

function renderMessage(m) {
  if (!m) return;
  let v = views.get(m.id);
  const sig = signature(m);
  if (v && Number(v.el.dataset.order) !== m._order) place(m.id, v.el, m._order);
  if (v && v.sig === sig) return;
  if (!v) {
    const node = el("article", "ek-msg " + (m.role === "user" ? "ek-user" : m.toolCall ? "ek-tool" : "ek-assistant"));
    node.id = "ek-m-" + m.id;
    sizes.observe(node);
    v = { el: node, sig: "" };
    views.set(m.id, v);
    place(m.id, node, m._order);
  }
  v.sig = sig;
  const node = v.el;
  node.setAttribute("aria-busy", m.isInProcess ? "true" : "false");
  // Each message is drawn on its own: one that cannot be (what the model
  // wrote can be anything) says so, and the others are drawn still.
  try {
    if (m.role === "user") {
      node.replaceChildren(el("p", "ek-user-text", typeof m.content === "string" ? m.content : ""));
    } else if (m.toolCall) {
      renderTool(node, m);
    } else {
      const md = el("div", "ek-md");
      if (typeof m.content === "string" && m.content) md.append(renderMarkdown(m.content));
      else if (m.isInProcess) md.append(el("span", "ek-typing", "Thinking…"));
      node.replaceChildren(md);
      if (m._stopped) node.append(el("p", "ek-meta", "Stopped."));
    }
  } catch (_) {
    node.replaceChildren(el("p", "ek-tool-error", "This message could not be shown."));
  }
  if (follow) toBottom();
}

// ----- following the conversation -----
//
// The log stays on the newest message unless the user scrolled up. Only
// the user's own input (wheel, touch, keys, the scroll bar, or a wheel
// over a chart, which its frame reports) can stop the following: the
// page's own scrolls and size changes (a chart drawing, a message
// growing) cannot. Coming back to the bottom, or sending a question,
// follows again.

let follow = true;
let userUntil = 0; // the user's input moves the log until then
let userCheck = 0; // the timer of userInput's second look
let pointerDown = false;
const USER_INPUT_MS = 800;
const NEAR_BOTTOM_PX = 48;

function userInput() {
  userUntil = performance.now() + USER_INPUT_MS;
  // The scroll may come before the input is known (a wheel over a chart
  // is reported by its frame): look again once it has happened.
  clearTimeout(userCheck);
  userCheck = setTimeout(() => {
    if (distanceFromBottom() >= NEAR_BOTTOM_PX) follow = false;
  }, 150);
}

// followAgain brings the newest message into view and follows it: the
// user's scroll just before (a wheel, then a question sent at once) is
// over, so that neither its second look nor a scroll of the page in its
// window stops the following again.
function followAgain() {
  clearTimeout(userCheck);
  userUntil = 0;
  follow = true;
  toBottom();
}

function distanceFromBottom() {
  return log.scrollHeight - log.scrollTop - log.clientHeight;
}

function toBottom() {
  log.scrollTop = log.scrollHeight;
}

log.addEventListener("wheel", userInput, { passive: true });
log.addEventListener("touchmove", userInput, { passive: true });
log.addEventListener("pointerdown", () => {
  pointerDown = true;
  userInput();
});
window.addEventListener("pointerup", () => {
  if (!pointerDown) return; // a click elsewhere does not scroll the log
  pointerDown = false;
  userInput();
});
window.addEventListener("ek-chart-input", userInput);
log.addEventListener("keydown", (e) => {
  if (["ArrowUp", "ArrowDown", "PageUp", "PageDown", "Home", "End", " "].includes(e.key)) userInput();
});
// Only the user stops the following; the page's own moves leave it as
// it is, and the size observer below brings the newest message back.
log.addEventListener("scroll", () => {
  if (distanceFromBottom() < NEAR_BOTTOM_PX) follow = true;
  else if (pointerDown || performance.now() < userUntil) follow = false;
});

// A message or the log changing size (a chart drawn, a notice shown)
// keeps the newest message in view.
const sizes = new ResizeObserver(() => {
  if (follow) toBottom();
});
sizes.observe(log);

function clearLog() {
  views.clear();
  log.replaceChildren();
  sizes.disconnect();
  sizes.observe(log);
  followAgain();
}

// ----- chat state -----

let saveTimer = 0;
function save() {
  if (saveTimer) return;
  saveTimer = setTimeout(saveNow, 150);
}
function saveNow() {
  clearTimeout(saveTimer);
  saveTimer = 0;
  // Nothing before boot has checked the stored chat against the session
  // (chat.key): the empty chat of a page still loading must not replace it.
  if (ended || chat.key === undefined) return;
  chat.savedAt = Date.now();
  try {
    storage.setItem(chatKeyOf(slot), JSON.stringify(chat));
  } catch (_) {
    // Over the storage quota: the last saved value stays, and it is
    // consistent (its lastSort matches its messages).
  }
}
window.addEventListener("pagehide", saveNow);

function readChat(key) {
  try {
    const c = JSON.parse(storage.getItem(key) || "null");
    if (c && typeof c.chatId === "string" && c.msgs && typeof c.lastSort === "number") return c;
  } catch (_) { /* none */ }
  return null;
}

// restore loads the slot's chat. A new slot (a new session) takes over
// the latest chat of the same user and agent (me.chatKey) that an earlier
// load left, as when a host page mints a new session on every load;
// another user's or agent's chat is never shown.
function restore() {
  chat = { chatId: "", lastSort: 0, msgs: {}, key: me.chatKey };
  const own = readChat(chatKeyOf(slot));
  if (own && own.key === me.chatKey) {
    chat = own;
    return;
  }
  let found = null;
  const chats = [];
  for (const k of storage.keys()) {
    if (!k || !k.startsWith(CHAT_PREFIX) || k === chatKeyOf(slot)) continue;
    const c = readChat(k);
    if (!c) continue;
    chats.push({ k, at: c.savedAt || 0 });
    if (c.key === me.chatKey && (!found || (c.savedAt || 0) > (found.c.savedAt || 0))) found = { k, c };
  }
  if (found) {
    chat = found.c;
    storage.removeItem(found.k); // moved: one copy per chat
  }
  // The oldest chats go beyond maxChats.
  chats.sort((a, b) => b.at - a.at);
  for (const { k } of chats.slice(maxChats)) storage.removeItem(k);
}

// validId keeps message ids usable as keys of chat.msgs.
function validId(id) {
  return typeof id === "string" && id !== "__proto__" && /^[A-Za-z0-9._:-]{1,200}$/.test(id);
}

// apply merges one stream line into the chat.
function apply(m) {
  if (!m || !validId(m.id)) return;
  if (typeof m.sort === "number" && m.sort > chat.lastSort) chat.lastSort = m.sort;
  if (m.id === "__cutoff__") {
    if (m.state?.chatId) chat.chatId = m.state.chatId;
    if (m.state?.isStreaming) setBusy(true);
  } else if (m.id === "__state__") {
    finish(m.state || {});
  } else {
    const old = chat.msgs[m.id];
    const next = old ? { ...old, ...m } : { ...m };
    next._order = m.sort ?? old?._order ?? 0;
    if (old && m.isDelta) next.content = (old.content || "") + (m.content || "");
    if (old?.toolCall || m.toolCall) next.toolCall = { ...(old?.toolCall || {}), ...(m.toolCall || {}) };
    chat.msgs[m.id] = next;
    schedule(m.id);
  }
  if (m.id === "__state__") saveNow();
  else save();
}

// finish applies __state__: the thread's history is authoritative.
function finish(state) {
  if (Array.isArray(state.messages)) {
    const keep = new Set();
    for (const h of state.messages) {
      if (!h || !validId(h.id)) continue;
      keep.add(h.id);
      const old = chat.msgs[h.id];
      chat.msgs[h.id] = { ...h, _order: h.sort ?? old?._order ?? 0, _stopped: old?._stopped };
      schedule(h.id);
    }
    for (const id of Object.keys(chat.msgs)) {
      if (!keep.has(id)) {
        delete chat.msgs[id];
        const gone = views.get(id)?.el;
        if (gone) {
          sizes.unobserve(gone);
          gone.remove();
        }
        views.delete(id);
      }
    }
  }
  // The thread's state is final: it is on screen before the page says
  // the turn ended (and the turn ends even if drawing fails).
  try {
    flushRender();
  } catch (_) { /* each message says what failed */ }
  // An error says more than an abort (a shutdown aborts with one), and a
  // turn that ended well clears a notice of the way (reconnecting). An
  // expired session's notice stays: it says what to do next.
  if (ended) {
    // keep it
  } else if (state.error) {
    show("The answer could not be completed: " + state.error, "error");
  } else if (state.aborted) {
    show("Stopped. The answer so far is kept.", "info");
  } else {
    show("");
  }
  setBusy(false);
}

function setBusy(b) {
  busy = b;
  log.setAttribute("aria-busy", b ? "true" : "false");
  const stopHadFocus = document.activeElement === stop;
  stop.hidden = !b;
  send.hidden = b;
  send.disabled = b || ended || !me;
  newChat.disabled = b || ended || !me;
  input.disabled = ended || !me;
  if (stopHadFocus && !b) input.focus();
}

// ----- streaming -----

// stream posts a chat request and applies its lines. It returns "done"
// (the stream ended with __state__), "refused" (an error answer, shown),
// "gone" (a rejoin of a chat that no longer exists: deleted, or its user
// expired), "unsent" (no answer: the request may not have reached the
// server) or "lost" (the connection dropped during the stream).
async function stream(req) {
  let res;
  streamOpen = false;
  try {
    res = await api(me.streamUrl, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/x-ndjson" },
      body: JSON.stringify(req),
    });
  } catch (_) {
    stopPending = false;
    return "unsent";
  }
  streamOpen = res.ok;
  if (res.ok && stopPending) {
    // Stop was pressed before the server had the turn: its abort would
    // have found no turn (204, nothing stopped). The turn runs now.
    stopPending = false;
    abortTurn();
  }
  if (!res.ok) {
    stopPending = false;
    const msg = await errorText(res);
    if (res.status === 404 && req.input === undefined && msg === "chat not found") {
      // The chat itself, not a route the page was given wrong (which
      // every request would meet: the chat is kept for when it works).
      setBusy(false);
      return "gone";
    }
    httpError(res, msg);
    return res.status === 409 && !/thread is full/i.test(msg) ? "running" : "refused";
  }
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let done = false;
  try {
    for (;;) {
      const { value, done: eof } = await reader.read();
      if (eof) break;
      buf += value;
      for (let nl; (nl = buf.indexOf("\n")) >= 0; ) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (!line) continue;
        let m;
        try {
          m = JSON.parse(line);
        } catch (_) {
          continue;
        }
        if (m.id === "__state__") done = true;
        apply(m);
      }
    }
  } catch (_) {
    // the connection was lost
  }
  streamOpen = false;
  return done ? "done" : "lost";
}

// httpError shows an error answer whose message is msg.
function httpError(res, msg) {
  setBusy(false);
  switch (res.status) {
    case 401:
      sessionExpired();
      break;
    case 409:
      if (/thread is full/i.test(msg)) {
        show("This conversation is full. Start a new chat to keep asking questions.", "error");
      } else {
        show("An answer is still being written in this conversation; it is shown here. Send your question again when it is done, or press Stop.", "error");
      }
      break;
    case 429: {
      const s = parseInt(res.headers.get("Retry-After") || "", 10);
      show("Too many questions at once. Please wait " + (s > 0 ? s + " second" + (s === 1 ? "" : "s") : "a moment") + " and try again.", "error");
      break;
    }
    default:
      show(res.status >= 500 ? "The chat service is unavailable right now. Please try again later." : "The request was refused: " + msg, "error");
  }
}

// run streams req and, when the connection drops before the end, rejoins
// the turn from the last line applied. A question that was refused, or
// that got no answer at all, goes back into the box: it was not asked.
async function run(req) {
  const asked = req.input;
  const giveBack = () => {
    if (asked !== undefined && !input.value.trim()) input.value = asked;
  };
  for (let attempt = 0; ; attempt++) {
    const seen = chat.lastSort;
    const r = await stream(req);
    if (r === "gone") {
      // Forget it, or every reload would ask for it again.
      chat = { chatId: "", lastSort: 0, msgs: {}, key: me.chatKey };
      clearLog();
      saveNow();
      show("This conversation is no longer available. Ask a question to start a new one.", "info");
      return;
    }
    if (r === "running" && req.input !== undefined) {
      // Another tab's turn runs in this chat: follow it here.
      giveBack();
      setBusy(true);
      req = { chatId: chat.chatId, resumeAfterSort: chat.lastSort };
      continue;
    }
    if (r !== "unsent" && r !== "lost") {
      if (r !== "done") giveBack();
      saveNow();
      return;
    }
    if (r === "unsent" && asked !== undefined && req.input !== undefined) {
      giveBack();
      setBusy(false);
      if (!ended) show("Your question could not be sent: the connection failed. Send it again.", "error");
      return;
    }
    // A stream cut while lines kept coming (a proxy that ends long
    // responses) gets its retries afresh: only a turn that makes no
    // progress is given up.
    if (chat.lastSort > seen) attempt = 0;
    if (ended || attempt >= 4 || !chat.chatId) break;
    show("Connection lost. Reconnecting…", "info");
    await new Promise((r) => setTimeout(r, 1000 * (attempt + 1)));
    req = { chatId: chat.chatId, resumeAfterSort: chat.lastSort };
  }
  setBusy(false);
  if (!ended) show("The connection was lost. Reload the page to see the answer.", "error");
}

form.addEventListener("submit", (e) => {
  e.preventDefault();
  const text = input.value.trim();
  if (!text || busy || ended || !me) return;
  if (!chat.chatId) chat.chatId = newChatId();
  input.value = "";
  show("");
  followAgain();
  setBusy(true);
  run({ input: text, chatId: chat.chatId });
});

input.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    form.requestSubmit();
  }
});

stop.addEventListener("click", () => {
  if (!busy || !chat.chatId) return;
  if (!streamOpen) {
    stopPending = true;
    return;
  }
  abortTurn();
});

async function abortTurn() {
  for (const m of Object.values(chat.msgs)) if (m.isInProcess && !m.toolCall) m._stopped = true;
  let res;
  try {
    res = await api(me.abortUrl, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ chatId: chat.chatId }),
    });
  } catch (_) {
    show("Could not stop the answer: the connection failed.", "error");
    return;
  }
  if (res.status === 401) sessionExpired();
  else if (!res.ok && res.status !== 204) show("Could not stop the answer: " + (await errorText(res)), "error");
}

newChat.addEventListener("click", () => {
  if (busy) return;
  chat = { chatId: "", lastSort: 0, msgs: {}, key: me.chatKey };
  clearLog();
  show("");
  saveNow();
  input.focus();
});

// ----- start -----

async function boot() {
  const url = new URL(location.href);
  const sid = url.searchParams.get("sessionId");
  // A host that mounts the shell behind the session middleware has had
  // the sessionId exchanged already: the shell carries the token.
  const handed = body.dataset.token;
  body.removeAttribute("data-token");
  if (sid !== null || handed) {
    // A new session gets a new slot, so it never falls back to a token an
    // earlier session of this frame (maybe another user's) stored. The
    // sessionId is single-use; keep it out of the history.
    slot = newChatId();
    url.searchParams.delete("sessionId");
    history.replaceState(null, "", url.pathname + url.search + "#ek=" + slot);
  } else {
    const m = /^#ek=([A-Za-z0-9-]{1,64})$/.exec(url.hash);
    slot = m ? m[1] : "";
  }
  if (handed) {
    token = handed;
    storage.setItem(tokenKey(), handed);
  } else if (sid !== null) {
    const why = await exchange(sid);
    if (why) return exchangeFailed(why);
  } else if (slot) {
    token = storage.getItem(tokenKey()) || "";
  }
  // Opened without a sessionId, and no token from an earlier load (or an
  // exchange that failed before a reload).
  if (!token) return sessionExpired("This chat has no session. Open it from the application to sign in.");
  let res;
  try {
    res = await api(body.dataset.meUrl);
  } catch (_) {
    show("The chat could not be loaded: the connection failed. Reload to try again.", "error");
    return;
  }
  if (res.status === 401) return sessionExpired();
  if (!res.ok) {
    show("The chat is not available: " + (await errorText(res)), "error");
    return;
  }
  try {
    me = await res.json();
  } catch (_) {
    show("The chat is not available: the server's answer was not understood. Reload to try again.", "error");
    return;
  }
  // "Download CSV" asks the data query API for every row, as CSV.
  setDownload(async (sqlQuery) => {
    const r = await api(me.dataUrl, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/csv" },
      body: JSON.stringify({ sqlQuery }),
    });
    if (r.status === 401) sessionExpired();
    return r;
  });
  renderAvatar();
  watchExpiry(storage.getItem(expiresKey()) || me.expiresAt);
  setBusy(false);
  restore();
  body.dataset.ready = "true";
  if (chat.chatId) {
    for (const m of Object.values(chat.msgs)) renderMessage(m);
    // Rejoin a turn that may still run, from the last line shown; the
    // page is busy until the thread's state arrives.
    setBusy(true);
    await run({ chatId: chat.chatId, resumeAfterSort: chat.lastSort });
  }
  if (!busy) input.focus();
}

boot();
