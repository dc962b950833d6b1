/* Small drawing helpers: elements from untrusted text, channel icons, labels, the toast. */
import { $ } from "./state.js";

export function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = window.showBidiControls(text);
  return node;
}

const SVG_NS = "http://www.w3.org/2000/svg";
const ICONS = {
  web: ["circle:12,12,9", "M3 12h18", "M12 3c3.2 3.6 3.2 14.4 0 18", "M12 3c-3.2 3.6-3.2 14.4 0 18"],
  telegram: ["M21.5 4.5 2.8 11.6l5.9 2.1 2.2 6.4 3.2-3.7 4.9 3.6z", "M8.7 13.7 21.5 4.5"],
  email: ["rect:3,5,18,14", "M3.5 6.5 12 13l8.5-6.5"],
  other: ["circle:12,12,4"],
};
export const CHANNEL_NAMES = { web: "Web", telegram: "Telegram", email: "E-mail" };

export function icon(channel) {
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("class", "icon icon-" + (ICONS[channel] ? channel : "other"));
  svg.setAttribute("aria-label", CHANNEL_NAMES[channel] || channel);
  svg.setAttribute("role", "img");
  for (const part of ICONS[channel] || ICONS.other) {
    let node;
    if (part.startsWith("circle:")) {
      const [cx, cy, r] = part.slice(7).split(",");
      node = document.createElementNS(SVG_NS, "circle");
      node.setAttribute("cx", cx);
      node.setAttribute("cy", cy);
      node.setAttribute("r", r);
    } else if (part.startsWith("rect:")) {
      const [x, y, w, h] = part.slice(5).split(",");
      node = document.createElementNS(SVG_NS, "rect");
      node.setAttribute("x", x);
      node.setAttribute("y", y);
      node.setAttribute("width", w);
      node.setAttribute("height", h);
      node.setAttribute("rx", "2");
    } else {
      node = document.createElementNS(SVG_NS, "path");
      node.setAttribute("d", part);
    }
    svg.appendChild(node);
  }
  return svg;
}

export function plural(n, word) {
  return n + " " + word + (n === 1 ? "" : "s");
}

export function titleOf(meta) {
  return window.showBidiControls((meta && meta.title) || "New conversation");
}

// Invisible characters in a name (zero-width space, word joiner, byte order mark,
// Hangul fillers...) are shown as what they are, e.g. [U+200B]: a stranger named
// "Ha\u200Bnan" read exactly as the owner's contact Hanan, and one named nothing else
// showed no name at all. The joiners that emoji sequences and Persian names need (ZWJ,
// ZWNJ) do their work. Names only: message text keeps them as typed.
const HIDDEN = /[\u00AD\u034F\u061C\u115F\u1160\u17B4\u17B5\u180B-\u180F\u200B\u2060-\u2064\u206A-\u206F\u3164\uFEFF\uFFA0]/g;
export function nameShown(name) {
  return String(name).replace(HIDDEN, (c) => "[U+" + c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0") + "]");
}

// Hebrew, Arabic, Syriac, Thaana, N'Ko... (the strong right-to-left blocks)
const RTL = /[\u0590-\u08FF\uFB1D-\uFDFF\uFE70-\uFEFF]|\uD802[\uDC00-\uDFFF]|\uD803[\uDC00-\uDE7F]|\uD83A[\uDC00-\uDFFF]|\uD83B[\uDC00-\uDEFF]/;

// "label · title": the title in a first-strong isolate when it holds right-to-left
// letters, so that an Arabic or Hebrew title after an English contact (or a number
// at the end of one) does not reorder the label and the dot around it.
// The label shown beside a title: none when the title starts with it. An automatic
// Telegram title names its contact ("Anna — Chess Club"), and "Anna · Anna — Chess Club"
// named her twice (bot/labels.py label_beside).
export function labelBeside(label, title) {
  return label && !String(title || "").startsWith(label + " \u2014 ") ? label : "";
}

export function labelled(label, title) {
  label = labelBeside(label, title);
  if (!label) return title;
  return nameShown(label) + " · " + (RTL.test(title) ? "\u2068" + title + "\u2069" : title);
}

// A session that ended (it expired, or Log out in another tab): the login page, not
// "HTTP 401" in a toast (Show all, Ask again) or nothing at all (Analytics).
export function sessionEnded(r) {
  if (r.status !== 401) return false;
  location.href = "/login";
  return true;
}

let toastTimer = null;
export function toast(text) {
  const box = $("toast");
  box.textContent = window.showBidiControls(text);
  box.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => (box.hidden = true), 4000);
}
export function kb(chars) {
  return chars >= 1048576 ? (chars / 1048576).toFixed(1) + " M" : chars >= 1024 ? Math.round(chars / 1024) + " K" : String(chars);
}
