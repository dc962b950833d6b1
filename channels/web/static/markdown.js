/* A small, safe Markdown renderer for chat messages.
 *
 * It never parses HTML: every piece of text becomes a DOM text node and every element is
 * created with createElement, so "<script>" or "<img onerror=...>" in a message is shown
 * as the characters it is. Links keep only http(s) and mailto URLs.
 *
 * Supported: paragraphs (single newlines kept as line breaks), # headings, ``` fenced code,
 * `inline code`, **bold**, *italic*, _italic_, ~~strike~~, [links](https://...), bare URLs,
 * - / * / 1. lists, > quotes, --- rules.
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
  const BIDI_CONTROLS = /[\u202A-\u202E\u2066-\u2069]/g;

  function showBidiControls(text) {
    return String(text).replace(
      BIDI_CONTROLS,
      (c) => "[U+" + c.charCodeAt(0).toString(16).toUpperCase() + "]"
    );
  }

  function el(tag, cls) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    return node;
  }


  // One alternation; the group that matched says which construct it is.
  const INLINE = new RegExp(
    [
      "(`+)([\\s\\S]*?[^`])\\1(?!`)", // 1,2 code span
      "\\*\\*(?=\\S)([\\s\\S]*?\\S)\\*\\*", // 3 bold
      "__(?=\\S)([\\s\\S]*?\\S)__(?!\\w)", // 4 bold
      "\\*(?=[^\\s*])([\\s\\S]*?[^\\s*])\\*(?!\\*)", // 5 italic
      "(?<!\\w)_(?=[^\\s_])([\\s\\S]*?[^\\s_])_(?!\\w)", // 6 italic
      "~~(?=\\S)([\\s\\S]*?\\S)~~", // 7 strike
      "\\[([^\\]\\n]+)\\]\\(([^)\\s]+)\\)", // 8,9 link
      "(https?:\\/\\/[^\\s<>\"']*[^\\s<>\"'.,:;!?)\\]])", // 10 bare URL
    ].join("|"),
    "g"
  );

  function inline(text, parent) {
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
        inline(m[3] !== undefined ? m[3] : m[4], node);
      } else if (m[5] !== undefined || m[6] !== undefined) {
        node = el("em");
        inline(m[5] !== undefined ? m[5] : m[6], node);
      } else if (m[7] !== undefined) {
        node = el("del");
        inline(m[7], node);
      } else if (m[8] !== undefined) {
        const href = safeUrl(m[9]);
        if (href) {
          node = el("a");
          node.href = href;
          node.target = "_blank";
          node.rel = "noopener noreferrer nofollow";
          inline(m[8], node);
        } else {
          node = document.createTextNode(m[0]);
        }
      } else if (m[10] !== undefined) {
        const href = safeUrl(m[10]);
        if (href) {
          node = el("a");
          node.href = href;
          node.target = "_blank";
          node.rel = "noopener noreferrer nofollow";
          node.textContent = m[10];
        } else {
          node = document.createTextNode(m[0]);
        }
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

  const FENCE = /^\s*(```|~~~)\s*([\w+-]*)\s*$/;
  const HEADING = /^(#{1,6})\s+(.*?)\s*#*\s*$/;
  const RULE = /^\s*([-*_])(\s*\1){2,}\s*$/;
  const QUOTE = /^\s*>\s?(.*)$/;
  const BULLET = /^\s*[-*+]\s+(.*)$/;
  const ORDERED = /^\s*(\d{1,9})[.)]\s+(.*)$/;

  function blocks(lines, parent) {
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (!line.trim()) {
        i++;
      } else if ((m = FENCE.exec(line))) {
        const fence = m[1];
        const body = [];
        i++;
        while (i < lines.length && lines[i].trim() !== fence) body.push(lines[i++]);
        i++; // closing fence (or end of text)
        const pre = el("pre");
        const code = el("code");
        if (m[2]) code.dataset.lang = m[2];
        code.textContent = body.join("\n");
        pre.appendChild(code);
        parent.appendChild(pre);
      } else if ((m = HEADING.exec(line))) {
        const h = el("h" + Math.min(m[1].length + 2, 6));
        inline(m[2], h);
        parent.appendChild(h);
        i++;
      } else if (RULE.test(line)) {
        parent.appendChild(el("hr"));
        i++;
      } else if (QUOTE.test(line)) {
        const inner = [];
        while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
          inner.push(m[1]);
          i++;
        }
        const q = el("blockquote");
        blocks(inner, q);
        parent.appendChild(q);
      } else if (BULLET.test(line) || ORDERED.test(line)) {
        const ordered = !BULLET.test(line);
        const pattern = ordered ? ORDERED : BULLET;
        const list = el(ordered ? "ol" : "ul");
        if (ordered) {
          const start = parseInt(ORDERED.exec(line)[1], 10);
          if (start !== 1) list.start = start;
        }
        let item = null;
        while (i < lines.length && lines[i].trim()) {
          const im = pattern.exec(lines[i]);
          if (im) {
            item = el("li");
            inline(ordered ? im[2] : im[1], item);
            list.appendChild(item);
          } else if (item && /^\s+/.test(lines[i])) {
            item.appendChild(el("br"));
            inline(lines[i].trim(), item);
          } else {
            break;
          }
          i++;
        }
        parent.appendChild(list);
      } else {
        const para = [];
        while (
          i < lines.length &&
          lines[i].trim() &&
          !FENCE.test(lines[i]) &&
          !HEADING.test(lines[i]) &&
          !QUOTE.test(lines[i]) &&
          !(para.length && (BULLET.test(lines[i]) || ORDERED.test(lines[i])))
        ) {
          para.push(lines[i]);
          i++;
        }
        const p = el("p");
        inlineLines(para, p);
        parent.appendChild(p);
      }
    }
  }

  /** Render Markdown `text` into a new DocumentFragment (never via innerHTML). */
  function renderMarkdown(text) {
    const frag = document.createDocumentFragment();
    const shown = showBidiControls(text == null ? "" : text);
    blocks(shown.replace(/\r\n?/g, "\n").split("\n"), frag);
    // Blocks of text take their direction from their own first letters: a Hebrew or
    // Arabic paragraph reads right to left, an English one beside it left to right. Set
    // once they are filled, innermost first: on an "auto" block, every change inside it
    // re-reads its whole text (20,000 lines took seconds).
    const filled = frag.querySelectorAll("p, li, ul, ol, blockquote, h3, h4, h5, h6");
    for (let i = filled.length - 1; i >= 0; i--) filled[i].dir = "auto";
    return frag;
  }

  global.renderMarkdown = renderMarkdown;
  global.showBidiControls = showBidiControls;
})(window);
