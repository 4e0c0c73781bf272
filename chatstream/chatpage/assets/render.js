// Rendering of tool calls: collapsible steps with the SQL, result tables
// and Vega-Lite charts. Every value from the model or the data goes in as
// text. Each chart is drawn in a sandboxed frame of an opaque origin
// (chart.js), which loads the chart libraries and can make no other
// request; when they fail to load (a blocked CDN, a failed integrity
// check), the chat still works and the chart says what failed.

// views holds, for each tool box, what to release when the box is drawn
// again (its chart frame's message handler).
const views = new WeakMap();

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

// str is a value of the model's or the data's JSON as text to show: a
// string as it is, a number or boolean as JSON writes it, anything else
// (an object, whose conversion a hostile input can make throw) nothing.
function str(v) {
  switch (typeof v) {
    case "string":
      return v;
    case "number":
    case "boolean":
      return String(v);
  }
  return "";
}

// pretty is v as indented JSON, or raw (its text as received) when v
// cannot be written again (nested too deep for the browser).
function pretty(v, raw) {
  try {
    return JSON.stringify(v, null, 2);
  } catch (_) {
    return str(raw);
  }
}

function stepTitle(name, input, result, done) {
  if (result && typeof result.error === "string") return "Step failed: " + (str(name) || "tool");
  switch (name) {
    case "svcMeta":
      return (done ? "Searched the data model" : "Searching the data model") + (str(input.searchQuery) ? ": " + str(input.searchQuery) : "");
    case "svcSqlApi":
      return (done ? "Ran a query" : "Running a query") + (str(input.queryTitle) ? ": " + str(input.queryTitle) : "");
    default:
      return (done ? "Used " : "Using ") + (str(name) || "a tool");
  }
}

// renderTool fills box with the tool call of msg.
export function renderTool(box, msg) {
  const tc = msg.toolCall || {};
  let input = parseJSON(tc.input);
  if (!input || typeof input !== "object") input = {};
  let result = parseJSON(tc.result);
  if (result !== null && typeof result !== "object") result = {};
  const done = result !== null;
  views.get(box)?.finalize();
  views.delete(box);
  box.replaceChildren();
  const details = el("details", "ek-step");
  const summary = el("summary", "ek-step-summary");
  summary.append(el("span", "ek-step-state" + (done ? (result.error ? " ek-failed" : " ek-done") : " ek-running"), done ? (result.error ? "!" : "✓") : "…"));
  summary.append(el("span", "", stepTitle(tc.name, input, result, done)));
  details.append(summary);
  const desc = str(input.description) || (result ? str(result.description) : "");
  if (desc) details.append(el("p", "ek-step-desc", desc));
  const sql = str(input.sqlQuery) || str(input.query) || (result ? str(result.sqlQuery) : "");
  if (sql) {
    const pre = el("pre", "ek-code ek-sql");
    pre.append(el("code", "", sql));
    details.append(pre);
  } else if (tc.name === "svcMeta" && result && Array.isArray(result.cubes)) {
    const ul = el("ul", "ek-cubes");
    for (const c of result.cubes) {
      if (!c || typeof c !== "object") continue;
      const members = Array.isArray(c.members) ? c.members.map((m) => (m && (str(m.title) || str(m.name))) || "").join(", ") : "";
      ul.append(el("li", "", (str(c.title) || str(c.name)) + (members ? ": " + members : "")));
    }
    details.append(ul);
  } else if (tc.input && !sql) {
    const pre = el("pre", "ek-code");
    pre.append(el("code", "", pretty(input, tc.input)));
    details.append(pre);
  }
  box.append(details);
  if (!result) return;
  if (typeof result.error === "string") {
    box.append(el("p", "ek-tool-error", result.error));
    return;
  }
  const title = str(result.queryTitle) || str(input.queryTitle);
  if (Array.isArray(result.data) && (Array.isArray(result.schema) || result.data.length === 0 || !Array.isArray(result.data[0]))) {
    const rows = toObjects(result);
    box.append(table(result, rows));
    const query = str(result.sqlQuery) || str(input.sqlQuery);
    if (query) box.append(tableActions(query, title, result.totalRows));
    const spec = parseJSON(str(result.vegaSpec) || str(input.vegaSpec));
    if (spec && typeof spec === "object" && !Array.isArray(spec) && rows.length > 0) box.append(chart(box, spec, rows, str(result.queryTitle)));
  }
}

// toObjects turns the result's rows (arrays matching schema, or objects)
// into objects keyed by column name.
function toObjects(result) {
  const cols = Array.isArray(result.schema) ? result.schema.map((c) => (c && str(c.name)) || "") : null;
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
  if (Array.isArray(result.schema)) return result.schema.map((c) => ({ name: (c && str(c.name)) || "", type: (c && str(c.column_type)) || "" }));
  const seen = [];
  for (const r of rows) for (const k of Object.keys(r)) if (!seen.includes(k)) seen.push(k);
  return seen.map((name) => ({ name, type: "" }));
}

const numberFormat = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 });

function cellText(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "number") return numberFormat.format(v);
  if (typeof v === "object") return pretty(v, "");
  return str(v);
}

function table(result, rows) {
  const cols = columnsOf(result, rows);
  const wrap = el("div", "ek-table-wrap");
  wrap.tabIndex = 0;
  const t = el("table", "ek-table");
  const total = typeof result.totalRows === "number" ? result.totalRows : rows.length;
  const cap = (str(result.queryTitle) ? str(result.queryTitle) + ": " : "") +
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

// download is how "Download CSV" fetches every row of a query: the chat
// page sets it (it holds the token and the data query API's URL). It
// returns the response, or throws.
let download = null;

export function setDownload(fn) {
  download = fn;
}

// fileName makes a CSV file name of a query title.
function fileName(title) {
  let name = "";
  for (const c of String(title || "")) {
    if (name.length >= 80) break;
    name += /[A-Za-z0-9 ._-]/.test(c) ? c : "_";
  }
  name = name.trim();
  return (name || "result") + ".csv";
}

// csvRecords counts the records of a CSV file as the data query API
// writes it: each ends with CRLF, which a quoted field may hold too. It
// reads the file's bytes a chunk at a time (a file may be larger than a
// string can be; '"' and LF are single bytes in UTF-8).
async function csvRecords(blob) {
  let n = 0;
  let quoted = false;
  const reader = blob.stream().getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return n;
    for (let i = 0; i < value.length; i++) {
      const c = value[i];
      if (c === 34) quoted = !quoted; // "" inside a field flips twice
      else if (c === 10 && !quoted) n++;
    }
  }
}

// tableActions are the buttons under a result table: "Download CSV"
// (every row, through the data query API) and "Show SQL". total is the
// query's row count as the tool saw it: a file with fewer rows (the data
// query API's row cap) says so.
function tableActions(query, title, total) {
  const bar = el("div", "ek-table-actions");
  const dl = el("button", "ek-link-button ek-download", "Download CSV");
  dl.type = "button";
  const toggle = el("button", "ek-link-button ek-show-sql", "Show SQL");
  toggle.type = "button";
  toggle.setAttribute("aria-expanded", "false");
  const status = el("span", "ek-table-status");
  status.setAttribute("role", "status");
  const pre = el("pre", "ek-code ek-sql ek-table-sql");
  pre.append(el("code", "", query));
  pre.hidden = true;
  toggle.addEventListener("click", () => {
    pre.hidden = !pre.hidden;
    toggle.textContent = pre.hidden ? "Show SQL" : "Hide SQL";
    toggle.setAttribute("aria-expanded", String(!pre.hidden));
  });
  dl.addEventListener("click", async () => {
    if (!download || dl.disabled) return;
    dl.disabled = true;
    status.className = "ek-table-status";
    status.textContent = "Preparing the file…";
    try {
      const res = await download(query);
      if (!res.ok) {
        let msg = "HTTP " + res.status;
        try {
          const j = await res.json();
          if (j && typeof j.error === "string") msg = j.error;
        } catch (_) { /* not JSON */ }
        throw new Error(msg);
      }
      const blob = await res.blob();
      const a = el("a");
      a.href = URL.createObjectURL(blob);
      a.download = fileName(title);
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(a.href), 60000);
      status.textContent = "";
      const rows = typeof total === "number" ? (await csvRecords(blob)) - 1 : -1; // the header
      status.textContent = typeof total === "number" && rows >= 0 && rows < total
        ? `The file holds the first ${numberFormat.format(rows)} of ${numberFormat.format(total)} rows.`
        : "";
    } catch (err) {
      status.className = "ek-table-status ek-tool-error";
      status.textContent = "The download failed: " + String((err && err.message) || err);
    } finally {
      dl.disabled = false;
    }
  });
  bar.append(dl, toggle, status);
  const wrap = el("div", "ek-table-extra");
  wrap.append(bar, pre);
  return wrap;
}

function cssVar(name, fallback) {
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v || fallback;
}

// charts are the chart frames waiting for or showing a chart. A message
// is a frame's when its event.source is the frame's window (never by
// what the message says).
const charts = new Set();

window.addEventListener("message", (e) => {
  if (!e.source || !e.data || typeof e.data !== "object") return;
  for (const c of charts) {
    if (!c.frame.isConnected) {
      c.stop(); // its box was drawn again or cleared
      continue;
    }
    if (c.frame.contentWindow === e.source) {
      c.onMessage(e.data);
      return;
    }
  }
});

// A frame that has not said it started in this time is reported, and so
// is a chart not drawn in DRAW_TIMEOUT_MS after that (its frame removed).
const FRAME_TIMEOUT_MS = 30000;
const DRAW_TIMEOUT_MS = 20000;

// Bounds of a chart spec: how deep its JSON nests, and how many values
// it holds. A spec is the model's.
const SPEC_MAX_DEPTH = 32;
const SPEC_MAX_NODES = 20000;

// cleanSpec copies a model's Vega-Lite spec for drawing over the result's
// rows: every data source it names (data and datasets, at any depth:
// layers, concatenations, facets, lookups) is left out, so that the
// chart can show the result's rows only, together with usermeta (embed
// options), $schema and __proto__ (which would set the copy's
// prototype). It returns null for a spec beyond the bounds.
function cleanSpec(spec) {
  let nodes = 0;
  const copy = (v, depth) => {
    if (++nodes > SPEC_MAX_NODES || depth > SPEC_MAX_DEPTH) throw new Error("spec too large");
    if (Array.isArray(v)) return v.map((x) => copy(x, depth + 1));
    if (v === null || typeof v !== "object") return v;
    const out = {};
    for (const [k, x] of Object.entries(v)) {
      if (k === "data" || k === "datasets" || k === "usermeta" || k === "$schema" || k === "__proto__") continue;
      out[k] = copy(x, depth + 1);
    }
    return out;
  };
  try {
    return copy(spec, 0);
  } catch (_) {
    return null;
  }
}

// chartURL is the chart frame's address, from the shell.
const chartURL = document.body.dataset.chartUrl || "";

// librariesMessage says which chart libraries did not load, from where,
// and how to serve them from the host's own server instead.
function librariesMessage(missing, source) {
  const names = Array.isArray(missing) ? missing.map(String).join(", ") : "";
  return "Charts could not be loaded: " + (names || "the chart libraries") +
    " did not load from " + (String(source || "") || "their source") + ". " +
    "To serve the chart libraries from this server instead of a CDN, the host loads them with chatpage.LoadVega " +
    "(the example server: npm ci --prefix .ci/vega, then -vega-dir .ci/vega/node_modules).";
}

// chart draws spec over rows in a sandboxed frame (see chart.js): the
// figure's data-state is "loading", then "drawn" or "failed".
function chart(owner, spec, rows, title) {
  const box = el("figure", "ek-chart");
  box.dataset.state = "loading";
  box.setAttribute("aria-label", "Chart" + (title ? ": " + title : ""));
  const s = cleanSpec(spec);
  if (s) s.data = { values: rows.map((r) => ({ ...r })) };
  if (s && s.width === undefined && !s.facet && !s.hconcat && !s.vconcat && !s.concat && !s.repeat) {
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
  const newFrame = () => {
    const frame = el("iframe", "ek-chart-view");
    // allow-scripts only: an opaque origin, no popups, no navigation of
    // the page, no forms.
    frame.setAttribute("sandbox", "allow-scripts");
    frame.setAttribute("referrerpolicy", "no-referrer");
    frame.title = "Chart" + (title ? ": " + title : "");
    frame.src = chartURL;
    return frame;
  };
  let frame = newFrame();
  if (!s) {
    box.dataset.state = "failed";
    box.append(el("p", "ek-tool-error", "The chart could not be drawn: its spec is too large."));
    return box;
  }
  let timer = 0;
  const fail = (text) => {
    stop();
    box.dataset.state = "failed";
    frame.remove();
    box.append(el("p", "ek-tool-error", text));
  };
  // Each wait has its deadline: the frame's start, then the drawing (a
  // spec's transforms can ask for any amount of work).
  const wait = (ms, text) => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      entry.timedOut = true;
      fail(text);
    }, ms);
  };
  const c = { frame, onMessage: null, stop: null };
  let done = false; // drawn or given up: the next chart may start
  const settle = () => {
    if (!done) {
      done = true;
      chartDone(entry);
    }
  };
  const stop = () => {
    clearTimeout(timer);
    charts.delete(c);
    drawnCharts.delete(entry);
    settle();
  };
  // redraw takes a drawn chart out of its frame, to be drawn again in a
  // new one when its turn in the queue comes.
  const redraw = () => {
    clearTimeout(timer);
    charts.delete(c);
    frame.remove();
    frame = newFrame();
    c.frame = frame;
    box.dataset.state = "loading";
    done = false;
  };
  // start shows the frame when the charts before it are done; false when
  // the chart's box is gone meanwhile.
  const start = () => {
    if (done || !box.isConnected) {
      done = true;
      return false;
    }
    charts.add(c);
    box.append(frame);
    wait(FRAME_TIMEOUT_MS, "The chart could not be drawn: its frame did not start.");
    return true;
  };
  const onMessage = (m) => {
    switch (m.embedkit) {
      case "chart-ready":
        wait(DRAW_TIMEOUT_MS, "The chart could not be drawn in time.");
        try {
          // The frame's origin is opaque: it has no name to target.
          frame.contentWindow?.postMessage({ embedkit: "chart", spec: s, config }, "*");
        } catch (_) {
          fail("The chart could not be drawn.");
        }
        break;
      case "chart-drawn":
      case "chart-size":
        if (typeof m.height === "number" && m.height > 0) frame.style.height = Math.min(Math.ceil(m.height), 4000) + "px";
        if (m.embedkit === "chart-drawn" && box.dataset.state === "loading") {
          clearTimeout(timer);
          box.dataset.state = "drawn";
          drawnCharts.add(entry);
          settle();
        }
        break;
      case "chart-libraries":
        fail(librariesMessage(m.missing, m.source));
        break;
      case "chart-error":
        fail("The chart could not be drawn.");
        break;
      case "chart-input":
        // The user scrolls with the pointer over the chart.
        window.dispatchEvent(new Event("ek-chart-input"));
        break;
    }
  };
  c.onMessage = onMessage;
  c.stop = stop;
  views.set(owner, { finalize: stop });
  const entry = { start, stop, redraw, box };
  queueChart(entry);
  return box;
}

// Charts are drawn one at a time: every chart frame is of one opaque
// origin, so the browser runs them in one process, where a chart whose
// spec asks for endless work would hold the others back until their
// deadlines gave them up. The next starts once the one before is drawn
// or given up (or its box is gone). A chart given up may still be
// computing, and its process lives as long as any chart frame in it:
// every drawn chart leaves its frame then, the browser ends the busy
// process, and they are drawn again, first, in a new one.
const chartQueue = [];
const CHART_RESTART_MS = 1000;
let chartActive = null; // the chart being drawn: { start, stop, redraw, box }
let chartPump = 0;
const drawnCharts = new Set(); // entries whose chart is drawn, in order

function queueChart(entry) {
  // A chart whose box left the page (a new chat) holds no one back.
  if (chartActive && !chartActive.box.isConnected) chartActive.stop();
  chartQueue.push(entry);
  // After the caller has put the chart's box in the page.
  if (!chartActive && !chartPump) chartPump = setTimeout(nextChart, 0);
}

function nextChart() {
  clearTimeout(chartPump);
  chartPump = 0;
  chartActive = null;
  while (chartQueue.length > 0) {
    const entry = chartQueue.shift();
    if (entry.start()) {
      chartActive = entry;
      return;
    }
  }
}

// chartDone is called once per chart: drawn, given up or gone.
function chartDone(entry) {
  const i = chartQueue.indexOf(entry);
  if (i >= 0) chartQueue.splice(i, 1);
  if (chartActive !== entry) return;
  if (entry.timedOut) {
    // Given up while it may still compute: no chart frame is left in its
    // process, and the next frame starts once the browser has let that
    // process go, not in it.
    const again = [...drawnCharts].filter((e) => e.box.isConnected);
    drawnCharts.clear();
    for (const e of again) e.redraw();
    chartQueue.unshift(...again);
    chartActive = null;
    clearTimeout(chartPump);
    chartPump = setTimeout(nextChart, CHART_RESTART_MS);
  } else {
    nextChart();
  }
}
