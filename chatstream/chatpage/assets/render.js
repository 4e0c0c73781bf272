// Rendering of tool calls: collapsible steps with the SQL, result tables
// and Vega-Lite charts. Every value from the model or the data goes in as
// text; charts run with the vega-interpreter (no eval) and a loader that
// refuses every URL, so a spec cannot fetch data or follow links.
//
// The chart libraries are loaded by the shell; when they fail to load (a
// blocked CDN, a failed integrity check), the chat still works and charts
// say so.

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

export function parseJSON(s) {
  if (typeof s !== "string" || s === "") return null;
  try {
    return JSON.parse(s);
  } catch (_) {
    return null;
  }
}

function stepTitle(name, input, result, done) {
  if (result && typeof result.error === "string") return "Step failed: " + (name || "tool");
  switch (name) {
    case "svcMeta":
      return (done ? "Searched the data model" : "Searching the data model") + (input.searchQuery ? ": " + input.searchQuery : "");
    case "svcSqlApi":
      return (done ? "Ran a query" : "Running a query") + (input.queryTitle ? ": " + input.queryTitle : "");
    default:
      return (done ? "Used " : "Using ") + (name || "a tool");
  }
}

// renderTool fills box with the tool call of msg.
export function renderTool(box, msg) {
  const tc = msg.toolCall || {};
  const input = parseJSON(tc.input) || {};
  const result = parseJSON(tc.result);
  const done = result !== null;
  views.get(box)?.then((r) => r.finalize(), () => {});
  views.delete(box);
  box.replaceChildren();
  const details = el("details", "ek-step");
  const summary = el("summary", "ek-step-summary");
  summary.append(el("span", "ek-step-state" + (done ? (result.error ? " ek-failed" : " ek-done") : " ek-running"), done ? (result.error ? "!" : "✓") : "…"));
  summary.append(el("span", "", stepTitle(tc.name, input, result, done)));
  details.append(summary);
  if (input.description || (result && result.description)) {
    details.append(el("p", "ek-step-desc", input.description || result.description));
  }
  const sql = input.sqlQuery || input.query || (result && result.sqlQuery);
  if (sql) {
    const pre = el("pre", "ek-code ek-sql");
    pre.append(el("code", "", sql));
    details.append(pre);
  } else if (tc.name === "svcMeta" && result && Array.isArray(result.cubes)) {
    const ul = el("ul", "ek-cubes");
    for (const c of result.cubes) {
      const members = Array.isArray(c.members) ? c.members.map((m) => m.title || m.name).join(", ") : "";
      ul.append(el("li", "", (c.title || c.name || "") + (members ? ": " + members : "")));
    }
    details.append(ul);
  } else if (tc.input && !sql) {
    const pre = el("pre", "ek-code");
    pre.append(el("code", "", JSON.stringify(input, null, 2)));
    details.append(pre);
  }
  box.append(details);
  if (!result) return;
  if (typeof result.error === "string") {
    box.append(el("p", "ek-tool-error", result.error));
    return;
  }
  if (Array.isArray(result.data) && (Array.isArray(result.schema) || result.data.length === 0 || !Array.isArray(result.data[0]))) {
    const rows = toObjects(result);
    box.append(table(result, rows));
    const spec = parseJSON(result.vegaSpec || input.vegaSpec);
    if (spec && typeof spec === "object" && rows.length > 0) box.append(chart(box, spec, rows, result.queryTitle));
  }
}

// toObjects turns the result's rows (arrays matching schema, or objects)
// into objects keyed by column name.
function toObjects(result) {
  const cols = Array.isArray(result.schema) ? result.schema.map((c) => String(c.name)) : null;
  return result.data.map((row) => {
    if (Array.isArray(row) && cols) {
      const o = Object.create(null);
      cols.forEach((c, i) => { o[c] = row[i]; });
      return o;
    }
    return row && typeof row === "object" ? row : { value: row };
  });
}

function columnsOf(result, rows) {
  if (Array.isArray(result.schema)) return result.schema.map((c) => ({ name: String(c.name), type: String(c.column_type || "") }));
  const seen = [];
  for (const r of rows) for (const k of Object.keys(r)) if (!seen.includes(k)) seen.push(k);
  return seen.map((name) => ({ name, type: "" }));
}

const numberFormat = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 });

function cellText(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "number") return numberFormat.format(v);
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

function table(result, rows) {
  const cols = columnsOf(result, rows);
  const wrap = el("div", "ek-table-wrap");
  wrap.tabIndex = 0;
  const t = el("table", "ek-table");
  const total = typeof result.totalRows === "number" ? result.totalRows : rows.length;
  const cap = (result.queryTitle ? result.queryTitle + ": " : "") +
    (total > rows.length ? `first ${rows.length} of ${total} rows` : `${rows.length} row${rows.length === 1 ? "" : "s"}`);
  t.append(el("caption", "", cap));
  wrap.setAttribute("aria-label", cap);
  const head = el("thead");
  const hr = el("tr");
  for (const c of cols) {
    const th = el("th", c.type === "number" ? "ek-num" : "", c.name);
    th.scope = "col";
    hr.append(th);
  }
  head.append(hr);
  t.append(head);
  const body = el("tbody");
  for (const r of rows) {
    const tr = el("tr");
    for (const c of cols) {
      const v = r[c.name];
      tr.append(el("td", typeof v === "number" ? "ek-num" : "", cellText(v)));
    }
    body.append(tr);
  }
  t.append(body);
  if (rows.length === 0) {
    const tr = el("tr");
    const td = el("td", "ek-empty", "No rows.");
    td.colSpan = Math.max(cols.length, 1);
    tr.append(td);
    body.append(tr);
  }
  wrap.append(t);
  return wrap;
}

function refuse() {
  return Promise.reject(new Error("charts cannot load URLs"));
}

// A loader that refuses everything: data.url, images, and href links
// (vega asks the loader's sanitize before following one).
function blockedLoader() {
  const l = globalThis.vega.loader();
  l.load = refuse;
  l.sanitize = refuse;
  l.http = refuse;
  l.file = refuse;
  return l;
}

function cssVar(name, fallback) {
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v || fallback;
}

// views holds the vega-embed result of each tool box, to finalize the
// view (its listeners and timers) when the box is drawn again.
const views = new WeakMap();

function chart(owner, spec, rows, title) {
  const box = el("figure", "ek-chart");
  const target = el("div", "ek-chart-view");
  box.append(target);
  box.setAttribute("aria-label", "Chart" + (title ? ": " + title : ""));
  const s = { ...spec };
  delete s.$schema; // the page's pinned Vega-Lite decides the version
  const values = rows.map((r) => ({ ...r }));
  if (s.data && typeof s.data === "object" && typeof s.data.name === "string" && s.data.name !== "") {
    s.data = { name: s.data.name };
    s.datasets = { ...(s.datasets || {}), [s.data.name]: values };
  } else {
    s.data = { values };
  }
  if (s.width === undefined && !s.facet && !s.hconcat && !s.vconcat && !s.concat && !s.repeat) {
    s.width = "container";
  }
  const fg = cssVar("--ek-fg", "#1f2937");
  const config = {
    background: null,
    view: { continuousHeight: 220, stroke: null },
    font: cssVar("--ek-font", "system-ui, sans-serif"),
    axis: { labelColor: fg, titleColor: fg, gridColor: cssVar("--ek-border", "#e5e7eb") },
    legend: { labelColor: fg, titleColor: fg },
    title: { color: fg },
    mark: { color: cssVar("--ek-accent", "#4f46e5") },
  };
  if (!globalThis.vega || !globalThis.vegaEmbed) {
    target.replaceChildren(el("p", "ek-tool-error", "Charts could not be loaded."));
    return box;
  }
  // The interpreter module (mapped by the shell's import map) loads on
  // the first chart.
  const embedded = import("vega-interpreter").then(({ expressionInterpreter }) => globalThis.vegaEmbed(target, s, {
    mode: "vega-lite",
    renderer: "svg",
    actions: false,
    ast: true,
    expr: expressionInterpreter,
    loader: blockedLoader(),
    defaultStyle: false,
    tooltip: { disableDefaultStyle: true, sanitize: (v) => String(v).replace(/[&<>"']/g, (c) => "&#" + c.charCodeAt(0) + ";") },
    config,
    logLevel: 0,
  }));
  views.set(owner, embedded);
  embedded.catch(() => {
    target.replaceChildren(el("p", "ek-tool-error", "The chart could not be drawn."));
  });
  return box;
}
