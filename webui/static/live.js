// Live streams that rest while the tab is hidden, and (at the end) the
// durations of waiting steps that move on between events. Hand-written
// (build.mjs does not touch it) and loaded after htmx's SSE extension.
//
// Every sse-connect element opens an EventSource, which holds one of the six
// HTTP/1.1 connections a browser allows per origin: with a few tabs open the
// next page would not load. So the extension's sources are wrapped: while the
// page is hidden (Page Visibility API) each stream is closed, and when it
// shows again it is reopened with ?seen= carrying a digest of what each
// fragment on the page shows now. The server then sends only the fragments
// that changed meanwhile (webui/live.go: fragmentDigest is the same FNV-1a 64
// of the event's data, in base 36). A stream the page ended for good (the
// sse-close event) or whose element went away stays closed.
(function () {
  "use strict";
  if (!window.htmx || !window.EventSource) return;

  // fnv64a is FNV-1a 64 of the string's UTF-8 bytes, in base 36 as Go's
  // strconv.FormatUint(sum, 36): four 16-bit limbs, so a fragment of a
  // megabyte hashes without a BigInt per byte.
  function fnv64a(s) {
    const bytes = new TextEncoder().encode(s);
    let h0 = 0x2325, h1 = 0x8422, h2 = 0x9ce4, h3 = 0xcbf2;
    for (let i = 0; i < bytes.length; i++) {
      h0 ^= bytes[i];
      // times the prime 2^40 + 0x1b3, modulo 2^64
      const t0 = h0 * 0x1b3;
      let t1 = h1 * 0x1b3;
      let t2 = h2 * 0x1b3 + (h0 << 8);
      const t3 = h3 * 0x1b3 + (h1 << 8);
      t1 += t0 >>> 16;
      h0 = t0 & 0xffff;
      t2 += t1 >>> 16;
      h1 = t1 & 0xffff;
      h3 = (t3 + (t2 >>> 16)) & 0xffff;
      h2 = t2 & 0xffff;
    }
    const n = (BigInt(h3) << 48n) | (BigInt(h2) << 32n) | (BigInt(h1) << 16n) | BigInt(h0);
    return n.toString(36);
  }

  // parseSeen reads a ?seen= value ("event:digest,...").
  function parseSeen(v) {
    const out = new Map();
    for (const part of (v || "").split(",")) {
      const i = part.indexOf(":");
      if (i > 0 && i < part.length - 1) out.set(part.slice(0, i), part.slice(i + 1));
    }
    return out;
  }

  const open = new Set(); // the streams that may be resting or running

  // Resumable is the EventSource the SSE extension is given: it forwards to a
  // real one, which it closes while the page is hidden and reopens after.
  class Resumable {
    constructor(url, init) {
      this.url = new URL(url, location.href);
      this.init = init;
      this.listeners = []; // [type, listener]
      this.watched = new Set(); // event types whose data is digested
      this.seen = parseSeen(this.url.searchParams.get("seen"));
      this.useSeen = this.url.searchParams.has("seen");
      this.onopen = null;
      this.onerror = null;
      this.onmessage = null;
      this.closed = false;
      // A page opened in a background tab connects when it is first shown.
      this.resting = document.visibilityState === "hidden";
      this.real = null;
      if (!this.resting) this.connect(this.url.toString());
      open.add(this);
    }

    get readyState() {
      if (this.closed) return EventSource.CLOSED;
      if (this.resting || !this.real) return EventSource.OPEN; // the extension must not retry
      return this.real.readyState;
    }

    connect(url) {
      const es = new EventSource(url, this.init);
      es.onopen = (e) => { if (this.onopen) this.onopen(e); };
      es.onerror = (e) => {
        // A failed stream the extension replaces with a new source of its
        // own; this one is done then.
        if (es.readyState === EventSource.CLOSED) open.delete(this);
        if (this.onerror) this.onerror(e);
      };
      es.onmessage = (e) => { if (this.onmessage) this.onmessage(e); };
      for (const type of this.watched) es.addEventListener(type, this.digest);
      for (const [type, fn] of this.listeners) es.addEventListener(type, fn);
      this.real = es;
    }

    digest = (e) => { this.seen.set(e.type, fnv64a(e.data)); };

    addEventListener(type, fn) {
      if (!this.watched.has(type)) {
        this.watched.add(type);
        if (this.real) this.real.addEventListener(type, this.digest);
      }
      this.listeners.push([type, fn]);
      if (this.real) this.real.addEventListener(type, fn);
    }

    removeEventListener(type, fn) {
      this.listeners = this.listeners.filter(([t, f]) => t !== type || f !== fn);
      if (this.real) this.real.removeEventListener(type, fn);
    }

    close() {
      this.closed = true;
      open.delete(this);
      if (this.real) this.real.close();
    }

    rest() {
      if (this.closed || this.resting) return;
      this.resting = true;
      if (this.real) this.real.close();
    }

    resume() {
      if (this.closed || !this.resting) return;
      this.resting = false;
      const url = new URL(this.url);
      if (this.useSeen) {
        const seen = [...this.seen].filter(([ev]) => ev !== "ended").map(([ev, d]) => ev + ":" + d).join(",");
        url.searchParams.set("seen", seen);
      }
      this.connect(url.toString());
    }
  }

  const create = htmx.createEventSource;
  if (!create) return; // the SSE extension did not load
  htmx.createEventSource = (url) => new Resumable(url, { withCredentials: true });

  document.addEventListener("visibilitychange", () => {
    const hidden = document.visibilityState === "hidden";
    for (const s of [...open]) {
      if (hidden) s.rest();
      else s.resume();
    }
  });

  // For tests and for the curious: how many streams are connected or resting.
  window.rezusLive = {
    digest: fnv64a,
    streams: () => [...open].map((s) => ({ url: s.real ? s.real.url : String(s.url), resting: s.resting,
      state: s.real ? s.real.readyState : EventSource.CLOSED })),
  };
})();

// Waits that count. A saga step that waits is rendered (webui/wait.templ)
// with its since and deadline and its durations as of its last record, so
// the live fragment does not change, and is not sent again, while nothing
// new is recorded. Here the durations move on each second by the reader's
// clock, in the words of domain.StepWait.Message: "4m10s (fails in 5m50s)",
// "(past its deadline)".
(function () {
  "use strict";

  // shortDuration is domain.ShortDuration: to the second, without zero
  // units (4m10s, 4m, 2h0m5s, 2h5m, 2h, 45s).
  function shortDuration(ms) {
    const t = Math.max(0, Math.round(ms / 1000));
    const h = Math.floor(t / 3600), m = Math.floor((t % 3600) / 60), s = t % 60;
    if (h > 0) return h + "h" + (m || s ? m + "m" : "") + (s ? s + "s" : "");
    if (m > 0) return m + "m" + (s ? s + "s" : "");
    return s + "s";
  }

  function tick() {
    const now = Date.now();
    for (const el of document.querySelectorAll("[data-wait-since]")) {
      const since = Date.parse(el.dataset.waitSince), deadline = Date.parse(el.dataset.waitDeadline);
      if (isNaN(since) || isNaN(deadline)) continue;
      const elapsed = el.querySelector("[data-wait-elapsed]"), left = el.querySelector("[data-wait-left]");
      if (elapsed) elapsed.textContent = shortDuration(now - since);
      if (left) left.textContent = deadline > now ? "(fails in " + shortDuration(deadline - now) + ")" : "(past its deadline)";
    }
  }

  tick();
  setInterval(tick, 1000);
  // A fragment just swapped in reads as of its last record until the next
  // tick: move it on at once.
  document.addEventListener("htmx:sseMessage", tick);
  document.addEventListener("htmx:afterSettle", tick);

  window.rezusWaits = { shortDuration, tick };
})();
