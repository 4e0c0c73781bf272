// A small Markdown renderer for what the model writes. It never parses
// HTML: it builds DOM nodes and puts every piece of text in with
// textContent, so nothing in the text can become markup. It supports
// paragraphs, headings (shown as bold paragraphs), emphasis, inline code,
// fenced code blocks, bulleted and numbered lists, and links (http, https
// and mailto only; anything else stays text). Images are never loaded:
// ![alt](url) shows as "[image: alt]".
//
// The text is hostile, so the renderer runs in time linear in its length,
// whatever it holds: it uses no regular expression that can backtrack. It
// scans each line once; a search for a closing delimiter remembers where
// it looked, so an opener that is never closed (a thousand "[x](") costs
// no second scan, and nesting is bounded. The elements one message makes
// are bounded too (MAX_ELEMENTS): past them, the rest is text.

// MAX_DEPTH bounds the nesting of links and emphasis; deeper is text.
const MAX_DEPTH = 8;

// MAX_ELEMENTS bounds the elements one message makes (and a few more:
// the block in which they run out is finished, and the rest is one
// element): a message can be made of little else than markup ("*a* " a
// million times over), and laying out a million elements would hold the
// page for seconds. Past the budget the rest of the message is plain
// text: its markup as written, its line breaks as spaces (laying out
// half a million short lines would hold the page too).
const MAX_ELEMENTS = 20000;
let budget = MAX_ELEMENTS; // left for the message being rendered

function el(tag, cls, text) {
  budget--;
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

// ws reports whether c is white space (as \s, which trim removes).
function ws(c) {
  return c !== undefined && c !== "" && c.trim() === "";
}

// word reports whether c is a word character (as \w).
function word(c) {
  if (c === undefined || c === "") return false;
  const k = c.charCodeAt(0);
  return (k >= 48 && k <= 57) || (k >= 65 && k <= 90) || (k >= 97 && k <= 122) || k === 95;
}

function safeHref(url) {
  try {
    const u = new URL(url);
    if (u.protocol === "http:" || u.protocol === "https:" || u.protocol === "mailto:") return u.href;
  } catch (_) { /* relative or invalid: text only */ }
  return null;
}

// finder returns a search for the first index i >= start with pred(i),
// or -1. It remembers its last answer: searches from increasing starts
// (as a left-to-right scan makes them) look at each index at most once.
function finder(s, pred) {
  let from = -1;
  let found = -1;
  return (start) => {
    if (from >= 0 && start >= from && (found < 0 || start <= found)) return found;
    let i = start;
    while (i < s.length && !pred(i)) i++;
    from = start;
    found = i < s.length ? i : -1;
    return found;
  };
}

// Scanner holds the searches of one piece of text, made when first used.
class Scanner {
  constructor(s) {
    this.s = s;
    this.f = {};
    this.runs = null; // backtick run length -> { starts, next }
  }

  find(name, start) {
    let f = this.f[name];
    if (!f) {
      const s = this.s;
      const preds = {
        bracket: (i) => s[i] === "]",
        paren: (i) => s[i] === ")",
        stars: (i) => s[i] === "*" && s[i + 1] === "*",
        unders: (i) => s[i] === "_" && s[i + 1] === "_",
        star: (i) => s[i] === "*" && s[i - 1] !== "*" && !ws(s[i - 1]),
        under: (i) => s[i] === "_" && s[i - 1] !== "_" && !ws(s[i - 1]) && !word(s[i + 1]),
      };
      f = this.f[name] = finder(s, preds[name]);
    }
    return f(start);
  }

  // closingRun returns the start of the first run of exactly n backticks
  // at or after start, or -1. The runs are listed once, in one pass.
  closingRun(n, start) {
    if (!this.runs) {
      this.runs = new Map();
      const s = this.s;
      for (let i = 0; i < s.length; ) {
        if (s[i] !== "`") {
          i++;
          continue;
        }
        let j = i;
        while (s[j] === "`") j++;
        let r = this.runs.get(j - i);
        if (!r) this.runs.set(j - i, (r = { starts: [], next: 0 }));
        r.starts.push(i);
        i = j;
      }
    }
    const r = this.runs.get(n);
    if (!r) return -1;
    while (r.next < r.starts.length && r.starts[r.next] < start) r.next++;
    return r.next < r.starts.length ? r.starts[r.next] : -1;
  }
}

const SPECIAL = new Set(["`", "!", "[", "*", "_"]);

// inline appends the inline Markdown of text to parent.
function inline(parent, text, depth = 0) {
  if (depth >= MAX_DEPTH || budget <= 0) {
    parent.append(text);
    return;
  }
  const s = text;
  const sc = new Scanner(s);
  let last = 0; // start of the text not yet appended
  let i = 0;
  const flush = (to) => {
    if (to > last) parent.append(s.slice(last, to));
  };
  while (i < s.length) {
    const c = s[i];
    if (!SPECIAL.has(c)) {
      i++;
      continue;
    }
    if (budget <= 0) break; // the rest is text
    if (c === "`") {
      let j = i;
      while (s[j] === "`") j++;
      const n = j - i;
      const close = sc.closingRun(n, j);
      if (close < 0) {
        i = j; // the run stays text
        continue;
      }
      flush(i);
      let code = s.slice(j, close);
      if (code.length >= 2 && code[0] === " " && code[code.length - 1] === " " && code.trim() !== "") code = code.slice(1, -1);
      parent.append(el("code", "", code));
      i = last = close + n;
      continue;
    }
    if (c === "!" || c === "[") {
      const image = c === "!";
      if (image && s[i + 1] !== "[") {
        i++;
        continue;
      }
      const open = image ? i + 1 : i;
      const j = sc.find("bracket", open + 1);
      const k = j >= 0 && s[j + 1] === "(" ? sc.find("paren", j + 2) : -1;
      if (k < 0 || (!image && j === open + 1)) {
        i++;
        continue;
      }
      flush(i);
      const label = s.slice(open + 1, j);
      let u = j + 2;
      while (u < k && !ws(s[u])) u++;
      const url = s.slice(j + 2, u);
      if (image) {
        parent.append(el("span", "ek-md-image", "[image" + (label ? ": " + label : "") + "]"));
      } else {
        const href = safeHref(url);
        if (href) {
          const a = el("a");
          a.href = href;
          a.target = "_blank";
          a.rel = "noopener noreferrer nofollow";
          a.referrerPolicy = "no-referrer";
          inline(a, label, depth + 1);
          parent.append(a);
        } else {
          inline(parent, label, depth + 1);
        }
      }
      i = last = k + 1;
      continue;
    }
    // * or _: strong (doubled) or emphasis.
    if (s[i + 1] === c) {
      const j = sc.find(c === "*" ? "stars" : "unders", i + 3);
      if (j >= 0) {
        flush(i);
        const strong = el("strong");
        inline(strong, s.slice(i + 2, j), depth + 1);
        parent.append(strong);
        i = last = j + 2;
        continue;
      }
      i += 2;
      continue;
    }
    const opens = !ws(s[i + 1]) && s[i + 1] !== undefined && (c === "*" || !word(s[i - 1]));
    const j = opens ? sc.find(c === "*" ? "star" : "under", i + 2) : -1;
    if (j < 0) {
      i++;
      continue;
    }
    flush(i);
    const em = el("em");
    inline(em, s.slice(i + 1, j), depth + 1);
    parent.append(em);
    i = last = j + 1;
  }
  flush(s.length);
}

function lines(parent, ls) {
  for (let i = 0; i < ls.length; i++) {
    if (i > 0) {
      if (budget <= 0) {
        parent.append("\n" + ls.slice(i).join("\n")); // the rest is plain text
        return;
      }
      parent.append(el("br"));
    }
    inline(parent, ls[i]);
  }
}

// indent returns the index after up to three leading white-space
// characters of line.
function indent(line) {
  let i = 0;
  while (i < 3 && ws(line[i])) i++;
  return i;
}

// skipWS returns the first index at or after i that is not white space.
function skipWS(line, i) {
  while (i < line.length && ws(line[i])) i++;
  return i;
}

// bullet returns the text of a "- item" line, or null.
function bullet(line) {
  const i = indent(line);
  const c = line[i];
  if ((c !== "-" && c !== "*" && c !== "+") || !ws(line[i + 1])) return null;
  return line.slice(skipWS(line, i + 1));
}

// numbered returns [number, text] of a "1. item" line, or null.
function numbered(line) {
  const i = indent(line);
  let j = i;
  while (j < line.length && j - i < 10 && line[j] >= "0" && line[j] <= "9") j++;
  if (j === i || j - i > 9 || (line[j] !== "." && line[j] !== ")") || !ws(line[j + 1])) return null;
  return [parseInt(line.slice(i, j), 10), line.slice(skipWS(line, j + 1))];
}

// heading returns the text of a "# heading" line, or null.
function heading(line) {
  const i = indent(line);
  let j = i;
  while (line[j] === "#") j++;
  if (j === i || j - i > 6 || !ws(line[j])) return null;
  let end = line.length;
  while (end > j && ws(line[end - 1])) end--;
  while (end > j && line[end - 1] === "#") end--;
  while (end > j && ws(line[end - 1])) end--;
  return line.slice(skipWS(line, j), Math.max(end, skipWS(line, j)));
}

// fence returns the fence ("```" or "~~~", as long as written) that
// opens a code block on line, or null.
function fence(line) {
  const i = indent(line);
  const c = line[i];
  if (c !== "`" && c !== "~") return null;
  let j = i;
  while (line[j] === c) j++;
  if (j - i < 3) return null;
  let k = skipWS(line, j);
  while (k < line.length && (word(line[k]) || line[k] === "+" || line[k] === "-")) k++;
  if (skipWS(line, k) !== line.length) return null;
  return line.slice(i, j);
}

// renderMarkdown returns a DocumentFragment for the Markdown text.
export function renderMarkdown(text) {
  budget = MAX_ELEMENTS;
  const frag = document.createDocumentFragment();
  const src = String(text ?? "").split("\r\n").join("\n").split("\r").join("\n").split("\n");
  let para = [];
  const flush = () => {
    if (para.length) {
      const p = el("p");
      lines(p, para);
      frag.append(p);
      para = [];
    }
  };
  for (let i = 0; i < src.length; i++) {
    const line = src[i];
    let m;
    if (budget <= 0) {
      // The rest of the message, plain, in one element.
      flush();
      const rest = el("p", "ek-md-rest");
      rest.textContent = src.slice(i).join("\n");
      frag.append(rest);
      break;
    }
    if ((m = fence(line)) !== null) {
      flush();
      const code = [];
      for (i++; i < src.length && !src[i].trim().startsWith(m); i++) code.push(src[i]);
      const pre = el("pre", "ek-code");
      pre.append(el("code", "", code.join("\n")));
      frag.append(pre);
    } else if (line.trim() === "") {
      flush();
    } else if ((m = heading(line)) !== null) {
      flush();
      const p = el("p", "ek-md-heading");
      const s = el("strong");
      inline(s, m);
      p.append(s);
      frag.append(p);
    } else if (bullet(line) !== null || (para.length === 0 && numbered(line) !== null)) {
      flush();
      const ordered = bullet(line) === null;
      const list = el(ordered ? "ol" : "ul");
      if (ordered) {
        const start = numbered(line)[0];
        if (start !== 1) list.start = start;
      }
      let item = null;
      for (; i < src.length; i++) {
        const l = src[i];
        if (budget <= 0) {
          i--; // the rest is text, as the loop above writes it
          break;
        }
        const text = ordered ? numbered(l)?.[1] : bullet(l);
        if (text !== undefined && text !== null) {
          item = el("li");
          inline(item, text);
          list.append(item);
        } else if (item && l.trim() !== "" && ws(l[0])) {
          item.append(el("br"));
          inline(item, l.trim());
        } else {
          i--;
          break;
        }
      }
      frag.append(list);
    } else {
      para.push(line);
    }
  }
  flush();
  return frag;
}
