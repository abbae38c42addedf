// Owns the UI's access to the public /v1 API: the project key (kept in sessionStorage, sent as
// `Authorization: Bearer` on every request), JSON reads and writes, authenticated downloads, and
// following the SSE event stream (read with fetch, since EventSource cannot send the key).

const KEY = "agentr.key";

export class ApiError extends Error {
  constructor(status, body) {
    super(body && body.detail ? `${status}: ${body.detail}` : `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

export function getKey() {
  return sessionStorage.getItem(KEY);
}

export function setKey(key) {
  sessionStorage.setItem(KEY, key.trim());
}

export function forgetKey() {
  sessionStorage.removeItem(KEY);
  me = null;
}

let me = null; // GET /v1/keys/me for the key in use (null: not known yet)

/** Read the key's scopes once (the shell does, before any page): pages then show only what the key
 * may do. Unknown (the read failed): every control is shown and the API decides, as before. */
export async function loadKeyScopes() {
  try {
    me = await get("/v1/keys/me");
  } catch (_) {
    me = null;
  }
  return me;
}

/** Whether the key holds `scope` (admin implies all); true while unknown. */
export function may(scope) {
  return !me || !me.may || me.may[scope] !== false;
}

/** The key's id (a reviewer's identity: claims, verdicts, "my reviews"), when known. */
export function myKeyId() {
  return me ? me.key_id : null;
}

/** The key's scopes, when known. */
export function keyScopes() {
  return me ? me.scopes : null;
}

function headers(extra = {}) {
  const key = getKey();
  return key ? { Authorization: `Bearer ${key}`, ...extra } : { ...extra };
}

async function fail(response) {
  let body = null;
  try {
    body = await response.json();
  } catch (_) {
    body = null;
  }
  if (response.status === 401) window.dispatchEvent(new CustomEvent("agentr:unauthorized"));
  throw new ApiError(response.status, body);
}

function url(path, params) {
  const u = new URL(path, window.location.origin);
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== "") u.searchParams.set(k, v);
  }
  return u;
}

export async function get(path, params) {
  const response = await fetch(url(path, params), { headers: headers() });
  if (!response.ok) await fail(response);
  return response.json();
}

/** Every item of a keyset-paginated list (up to `max` items). */
export async function all(path, params = {}, max = 2000) {
  const items = [];
  let cursor = null;
  do {
    const page = await get(path, { ...params, limit: 200, cursor });
    items.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor && items.length < max);
  return items;
}

export async function post(path, body) {
  const response = await fetch(url(path), {
    method: "POST",
    headers: headers({ "Content-Type": "application/json" }),
    body: JSON.stringify(body),
  });
  if (!response.ok) await fail(response);
  return response.json();
}

/** Download `path` with the key and hand the bytes to the browser as `filename`. */
export async function download(path, params, filename) {
  const response = await fetch(url(path, params), { headers: headers() });
  if (!response.ok) await fail(response);
  const blob = await response.blob();
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

/** The position of the project's newest event (GET /v1/events/position). A page reads it before it
 * reads the data it shows, then follows the stream after it: it neither replays the stream from 0 (a
 * fresh tab redrawing a finished run for every old event) nor misses an event that came meanwhile. */
export async function eventPosition() {
  return (await get("/v1/events/position")).position;
}

/**
 * Follow GET /v1/events (Server-Sent Events) after position `after` and call `onEvent(type, envelope)`
 * for each event. `after` is where the page's data was read: eventPosition() read before loading, or
 * a snapshot's own position (the tree page applies events to the tree it loaded, so it neither misses
 * nor applies twice an event); callers refresh from the API on each event, debounced. Returns a
 * function that stops following. Reconnects after a dropped connection, resuming after the last
 * position seen.
 */
export function follow(types, onEvent, { after: from }) {
  if (!Number.isInteger(from) || from < 0) throw new Error(`follow needs the position to start after, not ${from}`);
  const controller = new AbortController();
  let after = from;
  let stopped = false;
  async function loop() {
    while (!stopped) {
      try {
        const params = { follow: "true", after };
        if (types.length) params.types = types.join(",");
        const response = await fetch(url("/v1/events", params), { headers: headers(), signal: controller.signal });
        if (!response.ok) await fail(response);
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            let id = null;
            let type = "message";
            const data = [];
            for (const line of block.split("\n")) {
              if (line.startsWith("id: ")) id = line.slice(4);
              else if (line.startsWith("event: ")) type = line.slice(7);
              else if (line.startsWith("data: ")) data.push(line.slice(6));
            }
            if (id !== null) after = Number(id);
            if (data.length) onEvent(type, JSON.parse(data.join("\n")));
          }
        }
      } catch (err) {
        if (stopped || err.name === "AbortError") return;
        if (err instanceof ApiError && (err.status === 401 || err.status === 403)) return;
      }
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }
  loop();
  return () => {
    stopped = true;
    controller.abort();
  };
}
