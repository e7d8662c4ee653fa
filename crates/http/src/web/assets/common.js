// Shared by the demo's pages: element building, inline SVG icons, the API client, the toast,
// sign-in, and the channel that tells the other open tabs about moderators' decisions.

export const $ = (sel) => document.querySelector(sel);

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) el.append(c);
  return el;
}

const SVG_NS = 'http://www.w3.org/2000/svg';

export function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  for (const c of children.flat()) if (c) el.append(c);
  return el;
}

// 24x24 outline icons (stroke: currentColor), drawn here so no font or CDN is needed.
const PATHS = {
  bell: ['M6 8a6 6 0 0 1 12 0c0 7 3 9 3 9H3s3-2 3-9', 'M10.3 21a1.94 1.94 0 0 0 3.4 0'],
  comment: ['M21 11.5a8.4 8.4 0 0 1-9 8.4 8.9 8.9 0 0 1-3.9-.9L3 21l1.9-5.1A8.4 8.4 0 0 1 12 3a8.4 8.4 0 0 1 9 8.5z'],
  heart: ['M20.8 4.6a5.5 5.5 0 0 0-7.8 0L12 5.7l-1-1.1a5.5 5.5 0 0 0-7.8 7.8l1 1.1L12 21.3l7.8-7.8 1-1.1a5.5 5.5 0 0 0 0-7.8z'],
  image: ['M3 5h18v14H3z', 'M3 16l5-5 4 4 3-3 6 6', 'M15.5 8.5a1.5 1.5 0 1 0 .01 0'],
  close: ['M6 6l12 12', 'M18 6 6 18'],
  chart: ['M4 20V10', 'M10 20V4', 'M16 20v-7', 'M22 20H2'],
  check: ['M4 12l5 5L20 6'],
  eyeOff: ['M3 3l18 18', 'M10.6 6.1A9.8 9.8 0 0 1 12 6c5.5 0 9 6 9 6a16 16 0 0 1-2.6 3.3', 'M6.5 7.5C4.2 9 3 12 3 12s3.5 6 9 6a9 9 0 0 0 4-1'],
  x: ['M7 7l10 10', 'M17 7 7 17'],
};

/**
 * An inline SVG icon. With a `label` it is an image with that accessible name; without one it
 * is decoration (aria-hidden) and the control around it carries the name.
 */
export function icon(name, { label = null, filled = false, size = 24, cls = 'ico' } = {}) {
  const svg = s('svg', {
    class: cls, viewBox: '0 0 24 24', width: size, height: size, fill: filled ? 'currentColor' : 'none',
    stroke: 'currentColor', 'stroke-width': 2, 'stroke-linecap': 'round', 'stroke-linejoin': 'round',
    focusable: 'false', 'data-icon': name,
  }, ...PATHS[name].map((d) => s('path', { d })));
  if (label) {
    svg.setAttribute('role', 'img');
    svg.setAttribute('aria-label', label);
    svg.prepend(s('title', {}, label));
  } else {
    svg.setAttribute('aria-hidden', 'true');
  }
  return svg;
}

let toastTimer;
export function toast(msg) {
  const t = $('#toast');
  t.textContent = msg;
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.hidden = true; }, 4000);
}

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
  }
}

export const session = { token: null, me: null, world: null };

export async function api(method, path, body, extra = {}) {
  const headers = { Authorization: `Bearer ${session.token}`, ...extra };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const raw = res.status === 204 ? '' : await res.text();
  let data = null;
  try { data = raw ? JSON.parse(raw) : null; } catch { data = null; }
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

/** The demo world, or null when demo mode is off (`likewise serve`). */
export async function loadWorld() {
  const res = await fetch('/demo/world');
  session.world = res.ok ? await res.json() : null;
  return session.world;
}

/** Sign in as a seeded user (demo mode): a token from `/demo/token`. */
export async function demoSignIn(userId) {
  const tok = await fetch(`/demo/token?user_id=${encodeURIComponent(userId)}`);
  if (!tok.ok) throw new Error(`cannot sign in as ${userId}`);
  const t = await tok.json();
  session.token = t.token;
  session.me = { id: t.user_id, username: t.username };
  return session.me;
}

/** The user a page acts as: `?as=`, else the last one chosen, else the world's default. */
export function chosenUser() {
  const params = new URLSearchParams(location.search);
  return params.get('as') || localStorage.getItem('likewise.as') || session.world.default_user_id;
}

/** Decode a pasted token's subject (outside demo mode). */
export function tokenSubject(token) {
  const claims = JSON.parse(atob(token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/')));
  return claims.sub;
}

export function username(id) {
  const w = session.world;
  const u = w && (w.users.find((x) => x.user_id === id) || (w.moderator.user_id === id ? w.moderator : null));
  return u ? u.username : `user${id}`;
}

export function postInfo(id) {
  return session.world ? session.world.posts.find((x) => x.post_id === id) : null;
}

/** Keep `?as=` on the navigation links, so every page acts as the same user. */
export function linkNav(userId) {
  for (const a of document.querySelectorAll('nav.pages a[data-keep-as]')) {
    const url = new URL(a.href, location.href);
    if (userId) url.searchParams.set('as', userId);
    a.href = url.pathname + url.search;
  }
}

// Moderators' decisions reach the readers' tabs of the same browser at once (BroadcastChannel);
// other browsers and devices see them within a few seconds, as their pages poll (`every`).
const channel = typeof BroadcastChannel === 'function' ? new BroadcastChannel('likewise') : null;
export function broadcast(msg) { channel?.postMessage(msg); }
export function onBroadcast(fn) { channel?.addEventListener('message', (e) => fn(e.data)); }

/**
 * Run `fn` every `ms` while the tab is visible: paused while it is hidden, run at once when it
 * shows again. A run never overlaps the previous one. `stop()` ends it; `now()` runs it early.
 */
export function every(ms, fn) {
  let timer = null;
  let running = false;
  let stopped = false;
  let again = false;
  const schedule = (delay) => {
    clearTimeout(timer);
    if (!stopped && document.visibilityState === 'visible') timer = setTimeout(tick, delay);
  };
  async function tick() {
    if (stopped || running) return;
    running = true;
    again = false;
    try { await fn(); } catch { /* the next run retries */ }
    running = false;
    schedule(again ? 0 : ms);
  }
  const onVisibility = () => {
    if (document.visibilityState === 'visible') schedule(0);
    else clearTimeout(timer);
  };
  document.addEventListener('visibilitychange', onVisibility);
  schedule(ms);
  return {
    stop() { stopped = true; clearTimeout(timer); document.removeEventListener('visibilitychange', onVisibility); },
    now() { if (running) again = true; else schedule(0); },
  };
}

/** Milliseconds under a second, seconds above: "2 ms", "14 s". */
export function span(seconds) {
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  return `${Math.round(seconds)} s`;
}

export function ago(iso) {
  const sec = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (sec < 60) return 'now';
  if (sec < 3600) return `${Math.floor(sec / 60)}m`;
  if (sec < 86400) return `${Math.floor(sec / 3600)}h`;
  return `${Math.floor(sec / 86400)}d`;
}
