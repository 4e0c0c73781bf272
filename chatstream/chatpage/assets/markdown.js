// A small Markdown renderer for what the model writes. It never parses
// HTML: it builds DOM nodes and puts every piece of text in with
// textContent, so nothing in the text can become markup. It supports
// paragraphs, headings (shown as bold paragraphs), emphasis, inline code,
// fenced code blocks, bulleted and numbered lists, and links (http, https
// and mailto only; anything else stays text). Images are never loaded:
// ![alt](url) shows as "[image: alt]".

const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|!\[([^\]]*)\]\(([^)\s]*)[^)]*\)|\[([^\]]+)\]\(([^)\s]*)[^)]*\)|\*\*([\s\S]+?)\*\*|__([\s\S]+?)__|\*([^\s*](?:[\s\S]*?[^\s*])?)\*|\b_([^\s_](?:[\s\S]*?[^\s_])?)_\b/g;

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function safeHref(url) {
  try {
    const u = new URL(url);
    if (u.protocol === "http:" || u.protocol === "https:" || u.protocol === "mailto:") return u.href;
  } catch (_) { /* relative or invalid: text only */ }
  return null;
}

// inline appends the inline Markdown of text to parent.
function inline(parent, text) {
  let last = 0;
  const re = new RegExp(INLINE); // its own lastIndex: inline recurses
  for (let m; (m = re.exec(text)); ) {
    if (m.index > last) parent.append(text.slice(last, m.index));
    last = re.lastIndex;
    if (m[1]) {
      parent.append(el("code", "", m[2].trim() === "" ? m[2] : m[2].replace(/^ (.*) $/, "$1")));
    } else if (m[3] !== undefined) {
      parent.append(el("span", "ek-md-image", "[image" + (m[3] ? ": " + m[3] : "") + "]"));
    } else if (m[5] !== undefined) {
      const href = safeHref(m[6]);
      if (href) {
        const a = el("a");
        a.href = href;
        a.target = "_blank";
        a.rel = "noopener noreferrer nofollow";
        a.referrerPolicy = "no-referrer";
        inline(a, m[5]);
        parent.append(a);
      } else {
        inline(parent, m[5]);
      }
    } else if (m[7] !== undefined || m[8] !== undefined) {
      const s = el("strong");
      inline(s, m[7] ?? m[8]);
      parent.append(s);
    } else {
      const e = el("em");
      inline(e, m[9] ?? m[10]);
      parent.append(e);
    }
  }
  if (last < text.length) parent.append(text.slice(last));
}

function lines(parent, ls) {
  ls.forEach((l, i) => {
    if (i > 0) parent.append(el("br"));
    inline(parent, l);
  });
}

const BULLET = /^\s{0,3}[-*+]\s+(.*)$/;
const NUMBER = /^\s{0,3}(\d{1,9})[.)]\s+(.*)$/;
const HEADING = /^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$/;
const FENCE = /^\s{0,3}(```+|~~~+)\s*([\w+-]*)\s*$/;

// renderMarkdown returns a DocumentFragment for the Markdown text.
export function renderMarkdown(text) {
  const frag = document.createDocumentFragment();
  const src = String(text ?? "").replace(/\r\n?/g, "\n").split("\n");
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
    if ((m = FENCE.exec(line))) {
      flush();
      const close = m[1];
      const code = [];
      for (i++; i < src.length && !src[i].trim().startsWith(close); i++) code.push(src[i]);
      const pre = el("pre", "ek-code");
      pre.append(el("code", "", code.join("\n")));
      frag.append(pre);
    } else if (line.trim() === "") {
      flush();
    } else if ((m = HEADING.exec(line))) {
      flush();
      const p = el("p", "ek-md-heading");
      const s = el("strong");
      inline(s, m[1]);
      p.append(s);
      frag.append(p);
    } else if (BULLET.test(line) || (NUMBER.test(line) && para.length === 0)) {
      flush();
      const ordered = !BULLET.test(line);
      const re = ordered ? NUMBER : BULLET;
      const list = el(ordered ? "ol" : "ul");
      if (ordered) {
        const start = parseInt(NUMBER.exec(line)[1], 10);
        if (start !== 1) list.start = start;
      }
      let item = null;
      for (; i < src.length; i++) {
        const l = src[i];
        const lm = re.exec(l);
        if (lm) {
          item = el("li");
          inline(item, ordered ? lm[2] : lm[1]);
          list.append(item);
        } else if (item && l.trim() !== "" && /^\s+/.test(l)) {
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
