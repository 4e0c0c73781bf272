// The chart frame. The chat page draws each chart in a frame of its own,
// sandboxed with allow-scripts only: its origin is opaque, so nothing a
// spec does here can read the page's token, cookies or storage, and its
// Content-Security-Policy allows the chart libraries' scripts and no other
// request. The page sends the spec, with the rows inlined, by postMessage;
// the frame answers with its state and height:
//
//   frame -> page  {embedkit: "chart-ready"}
//                  {embedkit: "chart-libraries", missing: [...], source}
//   page -> frame  {embedkit: "chart", spec, config}
//   frame -> page  {embedkit: "chart-drawn", height}
//                  {embedkit: "chart-size", height}
//                  {embedkit: "chart-error", message}
//                  {embedkit: "chart-input"} (a wheel or touch over it)
//
// Every message carries data only; the frame takes messages from its
// parent window alone.

const target = document.getElementById("chart");
const parent = window.parent;

function post(msg) {
  // The page's origin is not known here (and this frame holds nothing
  // secret): any parent may read the messages.
  parent.postMessage(msg, "*");
}

function height() {
  return Math.ceil(document.documentElement.getBoundingClientRect().height);
}

// A loader that refuses everything: data.url, images, and href links
// (vega asks the loader's sanitize before following one). The policy
// blocks them too; refusing first keeps the console quiet.
function refuse() {
  return Promise.reject(new Error("charts cannot load URLs"));
}
function blockedLoader() {
  const l = globalThis.vega.loader();
  l.load = refuse;
  l.sanitize = refuse;
  l.http = refuse;
  l.file = refuse;
  return l;
}

// The tooltip is built as text: no value becomes markup or an image.
let tip = null;
function tooltip(_handler, event, _item, value) {
  if (value === null || value === undefined || value === "") {
    if (tip) tip.hidden = true;
    return;
  }
  if (!tip) {
    tip = document.createElement("div");
    tip.className = "ek-chart-tooltip";
    tip.setAttribute("role", "tooltip");
    document.body.append(tip);
  }
  tip.replaceChildren();
  if (value && typeof value === "object" && !Array.isArray(value)) {
    const { title, image: _ignored, ...rest } = value;
    if (title !== undefined) {
      const t = document.createElement("div");
      t.className = "title";
      t.textContent = text(title);
      tip.append(t);
    }
    const table = document.createElement("table");
    for (const [k, v] of Object.entries(rest)) {
      const tr = document.createElement("tr");
      const kd = document.createElement("td");
      kd.className = "key";
      kd.textContent = k;
      const vd = document.createElement("td");
      vd.className = "value";
      vd.textContent = text(v);
      tr.append(kd, vd);
      table.append(tr);
    }
    tip.append(table);
  } else {
    tip.textContent = text(value);
  }
  tip.hidden = false;
  const w = document.documentElement.clientWidth;
  const h = document.documentElement.clientHeight;
  const r = tip.getBoundingClientRect();
  let x = event.clientX + 12;
  let y = event.clientY + 12;
  if (x + r.width > w) x = Math.max(0, event.clientX - r.width - 12);
  if (y + r.height > h) y = Math.max(0, h - r.height);
  tip.style.left = x + "px";
  tip.style.top = y + "px";
}

function text(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "object") {
    try {
      return JSON.stringify(v);
    } catch (_) {
      return String(v);
    }
  }
  return String(v);
}

let drawn = false;
let started = false;

async function draw(spec, config) {
  const { expressionInterpreter } = await import("vega-interpreter");
  const s = { ...spec };
  // usermeta.embedOptions would replace the options below (actions,
  // editor URL, loader, source header): a spec never sets them.
  delete s.usermeta;
  delete s.$schema; // the pinned Vega-Lite decides the version
  await globalThis.vegaEmbed(target, s, {
    mode: "vega-lite",
    renderer: "svg",
    actions: false,
    ast: true,
    expr: expressionInterpreter,
    loader: blockedLoader(),
    defaultStyle: false,
    tooltip,
    config,
    logLevel: 0,
  });
  drawn = true;
  post({ embedkit: "chart-drawn", height: height() });
}

window.addEventListener("message", (e) => {
  if (e.source !== parent || started) return;
  const m = e.data;
  if (!m || m.embedkit !== "chart" || !m.spec || typeof m.spec !== "object") return;
  started = true;
  draw(m.spec, m.config && typeof m.config === "object" ? m.config : {}).catch((err) => {
    post({ embedkit: "chart-error", message: String((err && err.message) || err).slice(0, 300) });
  });
});

// A wheel or touch over the chart scrolls the page's conversation: the
// page must know it is the user's.
for (const type of ["wheel", "touchmove"]) {
  window.addEventListener(type, () => post({ embedkit: "chart-input" }), { passive: true });
}

new ResizeObserver(() => {
  if (drawn) post({ embedkit: "chart-size", height: height() });
}).observe(document.documentElement);

const missing = [["vega", globalThis.vega], ["vega-lite", globalThis.vegaLite], ["vega-embed", globalThis.vegaEmbed]]
  .filter(([, v]) => !v).map(([name]) => name);
if (missing.length) {
  post({ embedkit: "chart-libraries", missing, source: document.body.dataset.vegaSource || "" });
} else {
  import("vega-interpreter").then(
    () => post({ embedkit: "chart-ready" }),
    () => post({ embedkit: "chart-libraries", missing: ["vega-interpreter"], source: document.body.dataset.vegaSource || "" }),
  );
}
