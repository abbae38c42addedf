// Owns the polling that keeps the list pages live (Traces, Datasets, the Review queue): `every(ms, fn)`
// calls `fn` every `ms` milliseconds while the tab is visible (at once when it becomes visible again),
// one call at a time, and returns the function that stops it (a page returns it as its cleanup).
// `announce(text)` says a change in the page's polite aria-live region (#announce in index.html).

export const POLL_MS = 3000;

export function every(ms, fn) {
  let stopped = false;
  let busy = false;
  async function tick() {
    if (stopped || busy || document.hidden) return;
    busy = true;
    try {
      await fn();
    } catch (err) {
      console.warn("live refresh failed:", err);
    } finally {
      busy = false;
    }
  }
  const timer = setInterval(tick, ms);
  const onVisible = () => { if (!document.hidden) tick(); };
  document.addEventListener("visibilitychange", onVisible);
  return () => {
    stopped = true;
    clearInterval(timer);
    document.removeEventListener("visibilitychange", onVisible);
  };
}

export function announce(text) {
  const region = document.getElementById("announce");
  if (!region) return;
  region.textContent = "";
  // a new text node in a second frame, so screen readers announce a repeated message too
  requestAnimationFrame(() => { region.textContent = text; });
}
