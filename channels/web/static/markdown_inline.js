/* Inline Markdown for chat messages: code spans, emphasis, strike, links and bare URLs,
 * and the bidirectional controls shown as what they are. Used by markdown.js (blocks).
 *
 * It never parses HTML: every piece of text becomes a DOM text node and every element is
 * created with createElement. Links keep only http(s) and mailto URLs. Its work is
 * bounded: see SPAN, MAX_MARKS and the budget that markdown.js starts per message.
 */
(function (global) {
  "use strict";

  const SAFE_PROTOCOLS = ["http:", "https:", "mailto:"];

  function safeUrl(raw) {
    try {
      const url = new URL(raw, "http://invalid.invalid/");
      if (!SAFE_PROTOCOLS.includes(url.protocol) || url.host === "invalid.invalid") return null;
      return url.href;
    } catch (_e) {
      return null;
    }
  }

  // Bidirectional embedding, override and isolate controls (U+202A-U+202E,
  // U+2066-U+2069) re-order the characters around them: "\u202Eevil" displays as "live",
  // so a stranger in a group could make a message, a file name or a link read as
  // something else ("Trojan Source"). Shown as what they are, e.g. [U+202E]; the
  // stored text keeps them. Each block's own direction (dir=auto) still handles
  // Hebrew and Arabic, which need no such character.
  // One exception: a first-strong isolate closed on the same line with no control
  // inside (U+2068 ... U+2069), which the assistant puts around a Hebrew or Arabic name
  // or title in its own lines (bot.graphemes.isolate). It can move nothing outside it,
  // and what is inside is laid out as it would be alone: it is left to do its work.
  const BIDI_CONTROLS = /\u2068[^\u202A-\u202E\u2066-\u2069\n]*\u2069|[\u202A-\u202E\u2066-\u2069]/g;

  function showBidiControls(text) {
    return String(text).replace(BIDI_CONTROLS, (c) =>
      c.length > 1 ? c : "[U+" + c.charCodeAt(0).toString(16).toUpperCase() + "]"
    );
  }

  function el(tag, cls) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    return node;
  }


  // One alternation; the group that matched says which construct it is. Every span is
  // bounded (SPAN characters of content, 16 backticks, URL_CHARS of a link): an opening
  // mark without its closing one was otherwise searched for to the end of the line from
  // every such mark, so a stranger's 60 kB of "*a " froze the tab for a second, 1 MB of
  // it for minutes, and 20 kB of backticks for over a minute.
  const SPAN = "{0,500}?";
  const URL_CHARS = "{1,4096}";
  const INLINE = new RegExp(
    [
      "(?<!`)(`{1,16})(?!`)([\\s\\S]" + SPAN + "[^`])\\1(?!`)", // 1,2 code span
      "\\*\\*(?=\\S)([\\s\\S]" + SPAN + "\\S)\\*\\*", // 3 bold
      "__(?=\\S)([\\s\\S]" + SPAN + "\\S)__(?!\\w)", // 4 bold
      "\\*(?=[^\\s*])([\\s\\S]" + SPAN + "[^\\s*])\\*(?!\\*)", // 5 italic
      "(?<!\\w)_(?=[^\\s_])([\\s\\S]" + SPAN + "[^\\s_])_(?!\\w)", // 6 italic
      "~~(?=\\S)([\\s\\S]" + SPAN + "\\S)~~", // 7 strike
      "\\[([^[\\]\\n]{1,1000})\\]\\(([^)[\\]\\s]" + URL_CHARS + ")\\)", // 8,9 link
      "(https?:\\/\\/[^\\s<>\"']{0,4096}[^\\s<>\"'.,:;!?)\\]])", // 10 bare URL
    ].join("|"),
    "g"
  );

  // Deeper nesting (quotes in quotes, emphasis in emphasis) is shown as its text: each
  // level is a recursive call, and 5,000 ">" overflowed the stack, so the conversation
  // holding such a message could not be shown at all.
  const MAX_DEPTH = 16;

  // Even bounded, each opening mark may be searched SPAN characters ahead: a line with
  // more marks than this is shown as its plain text (nothing legible has that many), and
  // once a message has spent BUDGET_MS on inline formatting, its remaining lines are
  // shown as plain text too, so a 1 MB message costs well under a second whatever it
  // holds (each line costs at most MAX_MARKS searches, a few milliseconds).
  const MAX_MARKS = 1000;
  const BUDGET_MS = 200;
  let deadline = Infinity;
  const MARKS = new Set(["*", "_", "~", "`", "["]);

  function tooManyMarks(text) {
    if (text.length <= MAX_MARKS) return false;
    let count = 0;
    for (let i = 0; i < text.length; i++) {
      if (MARKS.has(text[i]) && ++count > MAX_MARKS) return true;
    }
    return false;
  }

  // A link opening in a new tab, filled by ``fill``; its source text when the address is
  // not a safe one.
  function link(address, source, fill) {
    const href = safeUrl(address);
    if (!href) return document.createTextNode(source);
    const a = el("a");
    a.href = href;
    a.target = "_blank";
    a.rel = "noopener noreferrer nofollow";
    fill(a);
    return a;
  }

  function inline(text, parent, depth) {
    depth = depth || 0;
    if (depth >= MAX_DEPTH || tooManyMarks(text) || performance.now() > deadline) {
      parent.appendChild(document.createTextNode(text));
      return;
    }
    let last = 0;
    INLINE.lastIndex = 0;
    let m;
    const re = new RegExp(INLINE.source, "g");
    while ((m = re.exec(text)) !== null) {
      if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
      let node;
      if (m[2] !== undefined) {
        node = el("code");
        node.textContent = m[2];
      } else if (m[3] !== undefined || m[4] !== undefined) {
        node = el("strong");
        inline(m[3] !== undefined ? m[3] : m[4], node, depth + 1);
      } else if (m[5] !== undefined || m[6] !== undefined) {
        node = el("em");
        inline(m[5] !== undefined ? m[5] : m[6], node, depth + 1);
      } else if (m[7] !== undefined) {
        node = el("del");
        inline(m[7], node, depth + 1);
      } else if (m[8] !== undefined) {
        node = link(m[9], m[0], (a) => inline(m[8], a, depth + 1));
      } else if (m[10] !== undefined) {
        node = link(m[10], m[0], (a) => (a.textContent = m[10]));
      }
      parent.appendChild(node);
      last = re.lastIndex;
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  }

  function inlineLines(lines, parent) {
    lines.forEach((line, i) => {
      if (i > 0) parent.appendChild(el("br"));
      inline(line, parent);
    });
  }

  /** Run ``fn`` (a message's rendering) with a budget of BUDGET_MS of inline
   * formatting, after which lines are shown as plain text. */
  function withBudget(fn) {
    deadline = performance.now() + BUDGET_MS;
    try {
      return fn();
    } finally {
      deadline = Infinity;
    }
  }

  function overBudget() {
    return performance.now() > deadline;
  }

  global.MarkdownInline = { el, inline, inlineLines, withBudget, overBudget, MAX_DEPTH };
  global.showBidiControls = showBidiControls;
})(window);
