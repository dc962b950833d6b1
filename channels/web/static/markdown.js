/* A small, safe Markdown renderer for chat messages: the blocks. Spans (code, emphasis,
 * links) are markdown_inline.js.
 *
 * It never parses HTML: every piece of text becomes a DOM text node and every element is
 * created with createElement, so "<script>" or "<img onerror=...>" in a message is shown
 * as the characters it is. Links keep only http(s) and mailto URLs.
 *
 * Supported: paragraphs (single newlines kept as line breaks), # headings, ``` fenced code,
 * `inline code`, **bold**, *italic*, _italic_, ~~strike~~, [links](https://...), bare URLs,
 * - / * / 1. lists (nested by indenting), > quotes, --- rules, | pipe | tables |.
 */
(function (global) {
  "use strict";

  const { el, inline, inlineLines, withBudget, overBudget, MAX_DEPTH } = global.MarkdownInline;

  const FENCE = /^\s*(```|~~~)\s*([\w+-]*)\s*$/;
  // One pass over the line: "(.*?)\s*#*\s*$" backtracked in cubic time over a line's
  // spaces ("# a", 4,000 spaces, "x" froze the tab for 26 s); the closing #s are
  // read in code (headingText), as channels/markdown_blocks.py does.
  const HEADING = /^(#{1,6})\s+(.*)$/;
  const RULE = /^\s*([-*_])(\s*\1){2,}\s*$/;
  const QUOTE = /^\s*>\s?(.*)$/;
  const BULLET = /^\s*[-*+]\s+(.*)$/;
  const ORDERED = /^\s*(\d{1,9})[.)]\s+(.*)$/;
  const DELIMITER_ROW = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;
  // Wider is no table a person writes: shown as text, so a stranger's line of 100,000
  // pipes does not become 100,000 cells.
  const MAX_COLUMNS = 64;

  // A heading's text without the closing #s a space sets apart ("## Plan ##"), keeping
  // those of a word ("# Learning C#").
  function headingText(rest) {
    const text = rest.trimEnd();
    let end = text.length;
    while (end > 0 && text[end - 1] === "#") end--;
    const core = text.slice(0, end);
    if (!core || /\s$/.test(core)) return core.trimEnd();
    return text;
  }

  function indentOf(line) {
    return line.length - line.trimStart().length;
  }

  // The cells of a table row: split at pipes (not at "\|"), without the outer ones.
  function cells(line) {
    let s = line.trim();
    if (s.startsWith("|")) s = s.slice(1);
    if (s.endsWith("|") && !s.endsWith("\\|")) s = s.slice(0, -1);
    return s.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));
  }

  function pipes(line, most) {
    let count = 0;
    for (let at = line.indexOf("|"); at >= 0 && count <= most; at = line.indexOf("|", at + 1)) count++;
    return count;
  }

  // A table starts at ``i``: a row with a pipe, then a delimiter row (|---|:-:|) with as
  // many cells. Returns the header's cells, or null.
  function tableAt(lines, i) {
    const head = lines[i];
    const rule = lines[i + 1];
    if (rule === undefined || !rule.includes("|") || !head.includes("|")) return null;
    if (pipes(head, MAX_COLUMNS + 1) > MAX_COLUMNS + 1 || pipes(rule, MAX_COLUMNS + 1) > MAX_COLUMNS + 1) return null;
    if (!DELIMITER_ROW.test(rule)) return null;
    const names = cells(head);
    return cells(rule).length === names.length ? names : null;
  }

  function table(lines, i, names, parent) {
    const align = cells(lines[i + 1]).map((c) =>
      c.endsWith(":") ? (c.startsWith(":") ? "align-center" : "align-right") : ""
    );
    const row = (values, tag) => {
      const tr = el("tr");
      // extra cells join the last one: what was written stays in view
      const shown = values.length > names.length
        ? values.slice(0, names.length - 1).concat(values.slice(names.length - 1).join(" | "))
        : values;
      names.forEach((_n, c) => {
        const cell = el(tag, align[c]);
        inline(shown[c] || "", cell);
        tr.appendChild(cell);
      });
      return tr;
    };
    const wrap = el("div", "table-wrap"); // a wide table scrolls inside, not the page
    const t = el("table");
    const thead = el("thead");
    thead.appendChild(row(names, "th"));
    t.appendChild(thead);
    const body = el("tbody");
    i += 2;
    const rest = [];
    while (i < lines.length && lines[i].trim() && lines[i].includes("|")) {
      // Out of time (80,000 rows took seconds): the rest of the rows as their text
      if (rest.length || overBudget()) rest.push(lines[i]);
      else body.appendChild(row(cells(lines[i]), "td"));
      i++;
    }
    t.appendChild(body);
    wrap.appendChild(t);
    parent.appendChild(wrap);
    if (rest.length) parent.appendChild(el("div", "plain")).textContent = rest.join("\n");
    return i;
  }

  // A list from line ``i``; a line indented past its markers belongs to the item above
  // it: a nested list, code or quote is rendered inside that item (before, a nested
  // list showed as its "- " lines, or as flat siblings of its parent).
  function list(lines, i, parent, depth) {
    const ordered = !BULLET.test(lines[i]);
    const pattern = ordered ? ORDERED : BULLET;
    const base = indentOf(lines[i]);
    const node = el(ordered ? "ol" : "ul");
    if (ordered) {
      const start = parseInt(ORDERED.exec(lines[i])[1], 10);
      if (start !== 1) node.start = start;
    }
    let item = null;
    let inner = [];
    const close = () => {
      if (item && inner.length) nested(inner, item, depth);
      inner = [];
    };
    while (i < lines.length && lines[i].trim()) {
      const line = lines[i];
      const im = indentOf(line) <= base + 1 ? pattern.exec(line) : null;
      if (im) {
        close();
        item = el("li");
        inline(ordered ? im[2] : im[1], item);
        node.appendChild(item);
      } else if (item && indentOf(line) > base) {
        inner.push(line);
      } else {
        break;
      }
      i++;
    }
    close();
    parent.appendChild(node);
    return i;
  }

  function nested(lines, item, depth) {
    let cut = Infinity;
    for (const line of lines) cut = Math.min(cut, indentOf(line));
    const inner = lines.map((line) => line.slice(cut));
    const structured = inner.some(
      (l, n) => BULLET.test(l) || ORDERED.test(l) || FENCE.test(l) || QUOTE.test(l) || tableAt(inner, n)
    );
    if (structured && depth + 1 < MAX_DEPTH) {
      blocks(inner, item, depth + 1);
      return;
    }
    for (const line of inner) {
      item.appendChild(el("br"));
      inline(line.trim(), item);
    }
  }

  function blocks(lines, parent, depth) {
    depth = depth || 0;
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      let names;
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
        inline(headingText(m[2]), h);
        parent.appendChild(h);
        i++;
      } else if ((names = tableAt(lines, i))) {
        i = table(lines, i, names, parent);
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
        if (depth >= MAX_DEPTH) inlineLines(inner, q);
        else blocks(inner, q, depth + 1);
        parent.appendChild(q);
      } else if (BULLET.test(line) || ORDERED.test(line)) {
        i = list(lines, i, parent, depth);
      } else {
        const para = [];
        while (
          i < lines.length &&
          lines[i].trim() &&
          !FENCE.test(lines[i]) &&
          !HEADING.test(lines[i]) &&
          !QUOTE.test(lines[i]) &&
          !(para.length && (BULLET.test(lines[i]) || ORDERED.test(lines[i]) || tableAt(lines, i)))
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
    const shown = global.showBidiControls(text == null ? "" : text);
    withBudget(() => blocks(shown.replace(/\r\n?/g, "\n").split("\n"), frag));
    // Blocks of text take their direction from their own first letters: a Hebrew or
    // Arabic paragraph reads right to left, an English one beside it left to right. Set
    // once they are filled, innermost first: on an "auto" block, every change inside it
    // re-reads its whole text (20,000 lines took seconds).
    const filled = frag.querySelectorAll("p, li, ul, ol, blockquote, h3, h4, h5, h6, th, td");
    for (let i = filled.length - 1; i >= 0; i--) filled[i].dir = "auto";
    return frag;
  }

  global.renderMarkdown = renderMarkdown;
})(window);
