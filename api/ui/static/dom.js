// Owns DOM and SVG construction for every page: elements built from data with textContent only
// (never innerHTML), so nothing a trace or a model wrote can run as markup.

const SVG_NS = "http://www.w3.org/2000/svg";

function apply(el, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.setAttribute("class", value);
    else if (key === "style") el.style.cssText = value; // CSSOM: allowed under the UI's CSP
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "value" && "value" in el) el.value = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/**
 * Replace `el`'s children with `children` (nested arrays flattened; null, undefined and false
 * skipped). The DOM's own replaceChildren would turn a null into the text "null".
 */
export function mount(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** An HTML element: h("a", {href: "#/x"}, "text", childNode, [more]). */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  apply(el, attrs);
  append(el, children);
  return el;
}

/** An SVG element. */
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  apply(el, attrs);
  append(el, children);
  return el;
}

export function fmt(value, digits = 3) {
  if (value === null || value === undefined) return "–";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(digits);
  return String(value);
}

export function shortId(id) {
  return id ? String(id).slice(0, 8) : "–";
}

export function link(href, text) {
  return h("a", { href }, text);
}

/** `content` (a wide table) in a box that scrolls sideways by itself, so a narrow window scrolls the
 * table, never the page; it takes the keyboard focus (arrow keys scroll it) and is named `label`. */
export function scrollBox(content, label) {
  return h("div", { class: "table-scroll", tabindex: "0", role: "region", "aria-label": label }, content);
}

/** In place of a control the key may not use: which scope it lacks, said before anything is sent. */
export function needsScope(scope, what) {
  return h("p", { class: "muted needs-scope", dataset: { scope } },
    `This key cannot ${what}: it lacks the ${scope} scope (a key with it: agentr keys create PROJECT --scope read --scope ${scope}).`);
}

/** A table from a header list and rows of cells. */
export function table(headers, rows, attrs = {}) {
  return h(
    "table",
    attrs,
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))),
    h("tbody", {}, rows.map((cells) => (cells instanceof Node ? cells : h("tr", {}, cells.map((c) => h("td", {}, c)))))),
  );
}

/** Colour of a value in [0, 1]: red (0) -> amber -> green (1); grey when null. */
export function valueColour(q) {
  if (q === null || q === undefined || Number.isNaN(q)) return "#c8ccd2";
  const t = Math.max(0, Math.min(1, q));
  const hue = Math.round(t * 120);
  return `hsl(${hue}, 70%, 48%)`;
}
