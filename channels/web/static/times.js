/* Times as the owner reads them: in the owner's zone (owner.timezone), relative to now. */
import { state } from "./state.js";

// Formatters in the owner's zone, made once per zone (Intl resolves DST per moment).
const formats = new Map();
function formatIn(kind, ts) {
  const key = kind + "|" + (state.timeZone || "");
  let format = formats.get(key);
  if (!format) {
    const options = kind === "date"
      ? { year: "numeric", month: "short", day: "numeric" }
      : { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", timeZoneName: "short" };
    try {
      format = new Intl.DateTimeFormat(undefined, Object.assign({ timeZone: state.timeZone || undefined }, options));
    } catch (e) { // a zone this browser does not know: its own, rather than nothing
      format = new Intl.DateTimeFormat(undefined, options);
    }
    formats.set(key, format);
  }
  return format.format(new Date(ts));
}
export const dateTime = (ts) => formatIn("time", ts);

export function setTimeZone(zone) {
  if (!zone || zone === state.timeZone) return;
  state.timeZone = zone;
  // times already shown were in the browser's zone (their days too)
  for (const t of document.querySelectorAll("time.when")) {
    t.title = dateTime(t.dateTime);
    t.textContent = relTime(t.dateTime);
  }
}

// The calendar day of a moment in the owner's zone, as a count of days.
const dayFormats = new Map();
function dayNumber(t) {
  const zone = state.timeZone || "";
  let format = dayFormats.get(zone);
  if (!format) {
    const options = { year: "numeric", month: "numeric", day: "numeric" };
    try {
      format = new Intl.DateTimeFormat("en-US", Object.assign({ timeZone: zone || undefined }, options));
    } catch (e) { // a zone this browser does not know: its own
      format = new Intl.DateTimeFormat("en-US", options);
    }
    dayFormats.set(zone, format);
  }
  const parts = {};
  for (const p of format.formatToParts(new Date(t))) parts[p.type] = Number(p.value);
  return Math.round(Date.UTC(parts.year, parts.month - 1, parts.day) / 86400000);
}

// "yesterday" is the owner's previous calendar day (owner.timezone), "N h ago" today
// and "N days ago" counts calendar days: 24-48 hours ago was "yesterday", so at 09:00
// last night's 23:30 read "10 h ago" and the morning before yesterday's "yesterday".
export function relTime(ts) {
  if (!ts) return "";
  const t = Date.parse(ts);
  if (isNaN(t)) return "";
  const now = Date.now();
  const s = Math.max(0, (now - t) / 1000);
  if (s < 45) return "just now";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  const days = Math.max(0, dayNumber(now) - dayNumber(t));
  if (days === 0) return Math.round(s / 3600) + " h ago";
  if (days === 1) return "yesterday";
  if (days < 30) return days + " days ago";
  return formatIn("date", t);
}
