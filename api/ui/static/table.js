// Owns the one table widget every list page uses: client-side sort by any column (click a header;
// again to reverse), a text filter over every column's value, a status filter built from the rows'
// statuses, a "shown of total" count, and optional row selection (checkboxes kept by row key across
// refreshes), and a Clear button that puts filters and sort back. Filter, sort and selection
// survive `update(rows)`, so a live page can re-render.

import { h, mount, scrollBox } from "./dom.js";

function sortKey(value) {
  if (value === null || value === undefined || value === "") return null;
  if (typeof value === "boolean") return value ? 1 : 0;
  return value;
}

function compare(a, b) {
  const x = sortKey(a), y = sortKey(b);
  if (x === null && y === null) return 0;
  if (x === null) return 1; // empty values last, whichever the direction
  if (y === null) return -1;
  if (typeof x === "number" && typeof y === "number") return x - y;
  return String(x).localeCompare(String(y), undefined, { numeric: true });
}

/**
 * A sortable, filterable table.
 *
 * columns: [{ key, label, value: (row) => number | string | null (sorting and the text filter),
 *             cell: (row) => Node | string (default: the value), class (text or row => text),
 *             title (row => tooltip), sortable (false: a plain header) }]
 * options: id (the <table>'s id), bodyId, rowKey (row => id), rowAttrs (row => attributes of the
 *          <tr>), status (row => its status, for the status filter; omit for none), select (show
 *          checkboxes), onSelect (rows => void), empty (text when there are no rows at all),
 *          sort ({ key, descending }) the initial order, label (the scroll box's accessible name).
 * The table sits in its own sideways-scrolling box (dom.scrollBox): a narrow window never scrolls the page.
 * Returns { el, update(rows), rows() (the shown rows), selected() (the selected rows), select(keys) }.
 */
export function dataTable(columns, options = {}) {
  const { id, bodyId, rowKey = (r) => r.id, rowAttrs = () => ({}), status, select = false, onSelect, empty = "Nothing yet." } = options;
  let all = [];
  let shown = [];
  let order = options.sort ? { ...options.sort } : null;
  const chosen = new Set();
  const text = h("input", { type: "search", class: "table-filter", placeholder: "filter…", "aria-label": "filter the rows", dataset: { table: id || "" } });
  const statusSelect = status ? h("select", { class: "table-status", "aria-label": "filter by status" }) : null;
  const count = h("span", { class: "muted table-count" });
  const clear = h("button", { type: "button", class: "table-clear", title: "clear the filters and the sort" }, "Clear");
  const body = h("tbody", bodyId ? { id: bodyId } : {});
  const headAll = select ? h("input", { type: "checkbox", class: "select-all", "aria-label": "select every shown row" }) : null;
  const headers = columns.map((c) => {
    if (c.sortable === false) return h("th", { dataset: { key: c.key } }, c.label);
    const button = h("button", { type: "button", class: "sort", dataset: { key: c.key } }, c.label);
    button.addEventListener("click", () => {
      order = order && order.key === c.key ? { key: c.key, descending: !order.descending } : { key: c.key, descending: false };
      render();
    });
    return h("th", { dataset: { key: c.key } }, button);
  });
  const table = h("table", { id, class: "data" },
    h("thead", {}, h("tr", {}, select ? h("th", { class: "select" }, headAll) : null, headers)), body);
  const el = h("div", { class: "data-table", dataset: { table: id || "" } },
    h("div", { class: "toolbar table-tools" }, text, statusSelect, clear, count),
    scrollBox(table, options.label || `${id || "the"} table`));

  const valueOf = (c, row) => (c.value ? c.value(row) : row[c.key]);
  function haystack(row) {
    return columns.map((c) => {
      const v = valueOf(c, row);
      return v === null || v === undefined ? "" : String(v);
    }).join(" ").toLowerCase();
  }
  function changed() {
    if (onSelect) onSelect(selected());
    if (headAll) headAll.checked = shown.length > 0 && shown.every((r) => chosen.has(rowKey(r)));
  }
  function rowEl(row) {
    const key = rowKey(row);
    const cells = columns.map((c) => {
      const content = c.cell ? c.cell(row) : valueOf(c, row);
      const cls = typeof c.class === "function" ? c.class(row) : c.class;
      return h("td", { class: cls, title: c.title ? c.title(row) : null }, content === null || content === undefined ? "–" : content);
    });
    let box = null;
    if (select) {
      box = h("input", { type: "checkbox", class: "select-row", "aria-label": "select this row", dataset: { key } });
      box.checked = chosen.has(key);
      box.addEventListener("change", () => {
        if (box.checked) chosen.add(key);
        else chosen.delete(key);
        changed();
      });
    }
    return h("tr", rowAttrs(row), select ? h("td", { class: "select" }, box) : null, cells);
  }
  function render() {
    const needle = text.value.trim().toLowerCase();
    const wanted = statusSelect ? statusSelect.value : "";
    shown = all.filter((r) => (!wanted || status(r) === wanted) && (!needle || haystack(r).includes(needle)));
    if (order) {
      const column = columns.find((c) => c.key === order.key);
      if (column) {
        const sign = order.descending ? -1 : 1;
        shown = shown.map((r, i) => [r, i]).sort(([a, i], [b, j]) => {
          const x = valueOf(column, a), y = valueOf(column, b);
          const empty = (sortKey(x) === null) - (sortKey(y) === null);
          return empty || sign * compare(x, y) || i - j; // empty values last either way, stable
        }).map(([r]) => r);
      }
    }
    for (const th of headers) {
      const key = th.dataset.key;
      if (!th.querySelector("button.sort")) continue;
      th.setAttribute("aria-sort", order && order.key === key ? (order.descending ? "descending" : "ascending") : "none");
    }
    const span = columns.length + (select ? 1 : 0);
    if (!all.length) mount(body, h("tr", {}, h("td", { colspan: span, class: "muted" }, empty)));
    else if (!shown.length) mount(body, h("tr", {}, h("td", { colspan: span, class: "muted no-match" }, "No row matches the filter.")));
    else mount(body, shown.map(rowEl));
    count.textContent = all.length === shown.length ? `${all.length} row(s)` : `${shown.length} of ${all.length} row(s)`;
    count.dataset.shown = String(shown.length);
    count.dataset.total = String(all.length);
    changed();
  }
  function update(rows) {
    all = rows.slice();
    const keys = new Set(all.map(rowKey));
    for (const key of [...chosen]) if (!keys.has(key)) chosen.delete(key);
    if (statusSelect) {
      const current = statusSelect.value;
      const statuses = [...new Set(all.map(status).filter((x) => x !== null && x !== undefined && x !== ""))].sort();
      mount(statusSelect, h("option", { value: "" }, "any status"), statuses.map((v) => h("option", { value: v }, v)));
      statusSelect.value = statuses.includes(current) ? current : "";
    }
    render();
  }
  function selected() {
    return all.filter((r) => chosen.has(rowKey(r)));
  }
  text.addEventListener("input", render);
  clear.addEventListener("click", () => {
    text.value = "";
    if (statusSelect) statusSelect.value = "";
    order = options.sort ? { ...options.sort } : null;
    render();
  });
  if (statusSelect) statusSelect.addEventListener("change", render);
  if (headAll) {
    headAll.addEventListener("change", () => {
      for (const r of shown) {
        if (headAll.checked) chosen.add(rowKey(r));
        else chosen.delete(rowKey(r));
      }
      render();
    });
  }
  return {
    el,
    update,
    rows: () => shown.slice(),
    selected,
    select(keys) {
      for (const key of keys) chosen.add(key);
      render();
    },
  };
}

/** A date's local text, and its time as the sort value (for a created_at column). */
export function dateColumn(key, label = key) {
  return { key, label, value: (r) => (r[key] ? Date.parse(r[key]) : null), cell: (r) => (r[key] ? new Date(r[key]).toLocaleString() : "–") };
}
