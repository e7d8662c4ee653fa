// Likewise web demo: a feed with optimistic hearts, a comments sheet, a live bell, and an
// insights panel on the viewer's own posts. The counts of the posts on screen, an open comments
// sheet and an open insights panel are read again every few seconds while the tab is visible,
// so a moderator's decision or a new like shows on any device.
// Plain ES module, no build step; talks only to the public API (and /demo/* in demo mode).

import {
  $, h, icon, toast, api, session, loadWorld, demoSignIn, chosenUser, tokenSubject, username, postInfo, linkNav,
  onBroadcast, ago, every, s as svgEl,
} from './common.js';

const state = Object.assign(session, { posts: new Map(), hideCounts: false });

const COUNTS_POLL_MS = 3000; // the counts of the posts on screen
const SHEET_POLL_MS = 3000; // an open comments sheet
const INSIGHTS_POLL_MS = 5000; // an open insights panel
// After the viewer's own like, the displayed count trails it for about a second: keep the
// optimistic count that long rather than show the older one and then the newer.
const OWN_LIKE_GRACE_MS = 2500;

// ---------- helpers ----------

// A fresh Idempotency-Key (visible ASCII, as the API asks).
function newKey() {
  if (crypto.randomUUID) return crypto.randomUUID();
  return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, '0')).join('');
}

// The server's rounding rule (likewise_core::display::count_text), for optimistic counts.
function countText(n) {
  if (n <= 0) return '0';
  if (n < 10000) return n.toLocaleString('en-US');
  const [unit, suffix] = n < 1e6 ? [1e3, 'K'] : n < 1e9 ? [1e6, 'M'] : [1e9, 'B'];
  const whole = Math.floor(n / unit);
  if (whole >= 100) return `${whole.toLocaleString('en-US')}${suffix}`;
  const tenth = Math.floor(((n % unit) * 10) / unit);
  return tenth === 0 ? `${whole}${suffix}` : `${whole}.${tenth}${suffix}`;
}

// ---------- sign-in ----------

async function signIn() {
  if (await loadWorld()) {
    const t = await demoSignIn(chosenUser());
    localStorage.setItem('likewise.as', t.id);
    linkNav(t.id);
    const sel = $('#as-user');
    for (const u of state.world.users.slice(0, 60)) {
      sel.append(h('option', { value: u.user_id, selected: u.user_id === t.id }, u.username));
    }
    if (!state.world.users.slice(0, 60).some((u) => u.user_id === t.id)) {
      sel.append(h('option', { value: t.id, selected: true }, t.username));
    }
    sel.addEventListener('change', () => { location.search = `?as=${sel.value}`; });
    return state.world.posts.map((p) => p.post_id);
  }
  // Not demo mode: a pasted token and post IDs.
  $('.who').hidden = true;
  const saved = JSON.parse(localStorage.getItem('likewise.signin') || 'null');
  if (saved) {
    state.token = saved.token;
    const sub = tokenSubject(saved.token);
    state.me = { id: sub, username: `user${sub}` };
    return saved.ids;
  }
  $('#signin').hidden = false;
  return new Promise((resolve) => {
    $('#signin-form').addEventListener('submit', (e) => {
      e.preventDefault();
      const ids = $('#signin-ids').value.split(',').map((s) => s.trim()).filter(Boolean);
      localStorage.setItem('likewise.signin', JSON.stringify({ token: $('#signin-token').value.trim(), ids }));
      location.reload();
      resolve(ids);
    });
  });
}

// ---------- feed ----------

function likedByText(p) {
  if (!p.liked_by.length) return null;
  const others = p.like_count === null ? p.liked_by.length > 1 : p.like_count > 1;
  return h('span', {}, 'Liked by ', h('b', {}, p.liked_by[0]), others ? ' and others' : '');
}

function renderMeta(card, p) {
  const meta = card.querySelector('.meta-likes');
  meta.replaceChildren();
  if (p.like_count !== null) {
    const n = p.like_count;
    meta.append(h('span', { class: 'count', 'data-testid': 'like-count', 'aria-live': 'polite' },
      `${p.like_count_text} ${n === 1 ? 'like' : 'likes'}`));
    const lb = likedByText(p);
    if (lb) meta.append(h('span', { class: 'muted' }, ' · '), lb);
  } else {
    const lb = likedByText(p);
    meta.append(lb || h('span', { class: 'muted' }, 'Like counts are hidden'));
  }
  const btn = card.querySelector('[data-testid="like-button"]');
  btn.setAttribute('aria-pressed', String(p.viewer_has_liked));
  btn.setAttribute('aria-label', p.viewer_has_liked ? 'Unlike' : 'Like');
}

function renderCard(p) {
  const info = postInfo(p.post_id);
  const hue = info ? info.hue : (Number(p.post_id) * 47) % 360;
  const caption = info ? info.caption : `Post ${p.post_id}`;
  const author = info ? info.author_username : username(p.author_id);
  const mine = p.author_id === state.me.id;
  const pic = h('div', {
    class: 'pic', role: 'img', 'aria-label': `${caption} (double-tap to like)`,
    style: `background: linear-gradient(135deg, hsl(${hue} 70% 70%), hsl(${(hue + 60) % 360} 70% 55%))`,
  }, icon('image', { size: 96, cls: 'ico placeholder' }));
  const card = h('article', { class: 'card', 'data-testid': `post-${p.post_id}`, 'aria-label': `Post by ${author}` },
    h('div', { class: 'head' }, author),
    pic,
    h('div', { class: 'actions' },
      h('button', {
        class: 'icon like', 'data-testid': 'like-button', 'aria-pressed': 'false', 'aria-label': 'Like',
        onclick: () => toggleLike(p.post_id),
      }, icon('heart', { cls: 'ico heart' })),
      h('button', {
        class: 'icon', 'data-testid': 'comments-button', 'aria-label': `Comments (${p.comment_count})`,
        disabled: !p.comments_enabled, onclick: (e) => openSheet(p.post_id, e.currentTarget),
      }, icon('comment')),
      mine ? h('button', {
        class: 'linkish insights-toggle', 'data-testid': 'insights-button', 'aria-expanded': 'false',
        'aria-controls': `insights-${p.post_id}`, onclick: (e) => toggleInsights(p.post_id, e.currentTarget),
      }, icon('chart', { size: 18 }), ' Insights') : null),
    mine ? h('section', {
      id: `insights-${p.post_id}`, class: 'insights', hidden: true, 'data-testid': 'insights-panel',
      'aria-label': 'Insights on your post',
    }) : null,
    h('div', { class: 'meta' },
      h('div', { class: 'meta-likes' }),
      h('p', { class: 'caption' }, h('b', {}, author), caption),
      h('div', { class: 'meta-comments' })));
  // Double-tap (or double-click) on the picture likes; it never unlikes.
  let lastTap = 0;
  const burst = () => {
    const b = icon('heart', { filled: true, size: 100, cls: 'burst' });
    pic.append(b);
    setTimeout(() => b.remove(), 700);
  };
  pic.addEventListener('dblclick', () => { burst(); if (!state.posts.get(p.post_id).view.viewer_has_liked) toggleLike(p.post_id); });
  pic.addEventListener('touchend', () => {
    const now = Date.now();
    if (now - lastTap < 300) pic.dispatchEvent(new MouseEvent('dblclick'));
    lastTap = now;
  });
  renderMeta(card, p);
  renderComments(card, p);
  if (viewObserver) viewObserver.observe(pic);
  if (screenObserver) screenObserver.observe(card);
  return card;
}

/** The comment count, the previews and "View all": drawn again only when they changed. */
function renderComments(card, p) {
  const box = card.querySelector('.meta-comments');
  const sig = JSON.stringify([p.comments_enabled, p.comment_count, p.preview_comments.map((c) => [c.author_username, c.text])]);
  if (box.dataset.sig === sig) return;
  box.dataset.sig = sig;
  const btn = card.querySelector('[data-testid="comments-button"]');
  btn.setAttribute('aria-label', `Comments (${p.comment_count})`);
  btn.disabled = !p.comments_enabled;
  const hadFocus = box.contains(document.activeElement);
  box.replaceChildren(
    ...p.preview_comments.map((c) => h('p', { class: 'preview' }, h('b', {}, c.author_username), ' ',
      h('span', { class: 'text', dir: 'auto' }, c.text))),
    p.comments_enabled
      ? (p.comment_count > 0
        ? h('button', {
          class: 'linkish view-all', 'data-testid': 'view-all-comments', onclick: (e) => openSheet(p.post_id, e.currentTarget),
        }, `View all ${p.comment_count} comments`)
        : null)
      : h('p', { class: 'muted' }, 'Comments are turned off.'));
  if (hadFocus) (box.querySelector('button') || btn).focus({ preventScroll: true });
}

// The posts on screen (any part of the card), whose counts are read again every few seconds.
const onScreen = new Set();
const screenObserver = typeof IntersectionObserver === 'function' ? new IntersectionObserver((entries) => {
  for (const e of entries) {
    if (e.isIntersecting && e.target.isConnected) onScreen.add(e.target);
    else {
      onScreen.delete(e.target);
      if (!e.target.isConnected) screenObserver.unobserve(e.target);
    }
  }
}) : null;

/** A fresh read of a post, applied in place; the viewer's own like in progress wins. */
function applyPost(v) {
  const s = state.posts.get(v.post_id);
  if (!s) return;
  const own = s.timer || s.inflight || Date.now() - s.likedAt < OWN_LIKE_GRACE_MS;
  if (own) {
    v.viewer_has_liked = s.view.viewer_has_liked; // a like in flight keeps its optimistic state
    v.like_count = s.view.like_count;
    v.like_count_text = s.view.like_count_text;
    v.liked_by = s.view.liked_by;
  } else {
    s.confirmed = v.viewer_has_liked;
  }
  s.view = v;
  renderMeta(s.card, v);
  renderComments(s.card, v);
}

/** Read the posts on screen again (one request). */
async function refreshOnScreen() {
  for (const card of onScreen) if (!card.isConnected) onScreen.delete(card);
  const ids = screenObserver ? [...onScreen].map((card) => card.dataset.testid.replace('post-', '')) : [...state.posts.keys()];
  if (!ids.length) return;
  const { posts } = await api('GET', `/v1/posts?ids=${ids.join(',')}`);
  for (const v of posts) applyPost(v);
}

// A view of each post counts once per page load, when its picture is on screen.
const viewed = new Set();
const viewObserver = typeof IntersectionObserver === 'function' ? new IntersectionObserver((entries) => {
  for (const e of entries) {
    const id = e.target.closest('article')?.dataset.testid?.replace('post-', '');
    if (!e.isIntersecting || !id || viewed.has(id)) continue;
    viewed.add(id);
    viewObserver.unobserve(e.target);
    api('POST', `/v1/posts/${id}/views`).catch(() => viewed.delete(id));
  }
}, { threshold: 0.5 }) : null;

// A moderator's decision in another tab: read the post now, and again until its counts
// settle (they trail a decision by up to about a second). The regular poll covers the rest.
async function refreshPost(postId) {
  let last = null;
  for (const wait of [0, 700, 1500, 2500]) {
    await new Promise((r) => setTimeout(r, wait));
    if (!state.posts.has(postId)) return;
    const v = await api('GET', `/v1/posts/${postId}`);
    applyPost(v);
    const sig = `${v.like_count}|${v.comment_count}`;
    if (wait >= 1500 && sig === last) return; // unchanged across a second or more: settled
    last = sig;
  }
}

// ---------- the author's insights ----------

const HOUR_MS = 3_600_000;
const BUCKETS = 12; // 5 minutes each
const LIKERS_PAGE = 100;
const MAX_LIKER_PAGES = 20; // the chart reads at most the latest 2,000 likers

/** Likes of the last hour per 5 minutes, from the likers list (newest first). */
async function likesLastHour(postId) {
  const since = Date.now() - HOUR_MS;
  const buckets = new Array(BUCKETS).fill(0);
  let cursor = null;
  let capped = false;
  for (let page = 0; ; page++) {
    if (page === MAX_LIKER_PAGES) { capped = true; break; }
    const q = cursor ? `&cursor=${encodeURIComponent(cursor)}` : '';
    const r = await api('GET', `/v1/posts/${postId}/likers?limit=${LIKERS_PAGE}${q}`);
    let older = false;
    for (const l of r.items) {
      const t = Date.parse(l.liked_at);
      if (t < since) { older = true; break; }
      buckets[Math.min(BUCKETS - 1, Math.floor((t - since) / (HOUR_MS / BUCKETS)))]++;
    }
    cursor = r.next_cursor;
    if (older || !cursor) break;
  }
  return { buckets, capped };
}

/** Comments held on the post that its author may approve (pending or restricted). */
async function heldOnPost(postId) {
  let held = 0;
  let cursor = null;
  for (let page = 0; page < 10; page++) {
    const q = new URLSearchParams({ order: 'newest', limit: '100' });
    if (cursor) q.set('cursor', cursor);
    const r = await api('GET', `/v1/posts/${postId}/comments?${q}`);
    held += r.items.filter((c) => c.status === 'pending' || c.status === 'restricted').length;
    cursor = r.next_cursor;
    if (!cursor) break;
  }
  return held;
}

/** Bars per 5 minutes, each with its number, a scale line at the top bar, and a time axis. */
function likesChart({ buckets, capped }) {
  const total = buckets.reduce((a, b) => a + b, 0);
  const max = Math.max(1, ...buckets);
  const W = 300;
  const H = 110;
  const top = 14; // room for the numbers over the bars
  const base = H - 14; // the bars' baseline, over the time axis
  const bw = W / BUCKETS;
  const capNote = `counted from the latest ${(MAX_LIKER_PAGES * LIKERS_PAGE).toLocaleString('en-US')} likes only`;
  const label = `Likes in the last hour, per 5 minutes, oldest first: ${buckets.join(', ')}`
    + (capped ? ` (${capNote})` : '');
  const y = (n) => base - Math.round((n / max) * (base - top));
  const bars = buckets.flatMap((n, i) => {
    const x = i * bw + 2;
    return [
      svgEl('rect', { x, y: y(n), width: bw - 4, height: base - y(n), rx: 2, class: 'bar' }),
      n > 0 ? svgEl('text', { x: x + (bw - 4) / 2, y: y(n) - 2, class: 'count', 'text-anchor': 'middle' }, n.toLocaleString('en-US')) : null,
    ];
  });
  const chart = svgEl('svg', {
    viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', 'aria-label': label, class: 'chart',
    'data-testid': 'likes-chart', 'data-total': total, 'data-max': max,
  }, svgEl('title', {}, label),
  svgEl('line', { x1: 0, x2: W, y1: top, y2: top, class: 'grid' }),
  svgEl('line', { x1: 0, x2: W, y1: base, y2: base, class: 'grid' }),
  ...bars,
  svgEl('text', { x: 0, y: H - 2, class: 'axis' }, '60 min ago'),
  svgEl('text', { x: W / 2, y: H - 2, class: 'axis', 'text-anchor': 'middle' }, '30 min'),
  svgEl('text', { x: W, y: H - 2, class: 'axis', 'text-anchor': 'end' }, 'now'));
  return h('figure', { class: 'likes-chart' },
    chart,
    h('figcaption', { class: 'chart-note muted', 'data-testid': 'chart-note' },
      `${total.toLocaleString('en-US')} likes in the last hour, per 5 minutes (busiest: ${max.toLocaleString('en-US')})`,
      capped ? h('b', {}, `; ${capNote}, so older likes of the hour are missing`) : null, '.'));
}

function stat(name, value, testid) {
  return h('div', { class: 'stat' }, h('dt', {}, name), h('dd', { 'data-testid': testid }, value));
}

async function loadInsights(postId, panel, again = false) {
  if (again && !panel.isConnected) { insightPolls.get(postId)?.stop(); return; } // the feed was drawn again
  if (!again) panel.replaceChildren(h('p', { class: 'muted' }, 'Loading insights…'));
  try {
    const [ins, trending, held, hour] = await Promise.all([
      api('GET', `/v1/posts/${postId}/insights`),
      api('GET', '/v1/trending?window=1h&limit=100').catch(() => null),
      heldOnPost(postId).catch(() => null),
      likesLastHour(postId).catch(() => null),
    ]);
    const rank = trending ? trending.items.findIndex((t) => t.post_id === postId) : -1;
    const place = !trending ? 'unknown' : rank >= 0 ? `#${rank + 1}` : 'not in the top 100';
    if (panel.hidden) return; // closed meanwhile
    panel.replaceChildren(
      h('h3', {}, 'Insights'),
      h('dl', { class: 'stats' },
        stat('Likes (exact)', ins.like_count.toLocaleString('en-US'), 'insights-likes'),
        stat('Unique viewers', ins.unique_viewers.toLocaleString('en-US'), 'insights-viewers'),
        stat('Comments', ins.comment_count.toLocaleString('en-US'), 'insights-comments'),
        stat('Held for your approval', held === null ? 'unknown' : String(held), 'insights-held'),
        stat('Trending, last hour', place, 'insights-trending')),
      hour ? likesChart(hour) : h('p', { class: 'muted' }, 'The likes chart is unavailable.'));
  } catch (e) {
    // A failed refresh keeps the figures shown; the next one retries.
    if (!again) panel.replaceChildren(h('p', { class: 'muted' }, `Couldn't load insights: ${e.message}`));
  }
}

// Open panels read their figures again every few seconds.
const insightPolls = new Map();

function toggleInsights(postId, btn) {
  const panel = document.getElementById(`insights-${postId}`);
  const open = panel.hidden;
  panel.hidden = !open;
  btn.setAttribute('aria-expanded', String(open));
  insightPolls.get(postId)?.stop();
  insightPolls.delete(postId);
  if (open) {
    loadInsights(postId, panel);
    insightPolls.set(postId, every(INSIGHTS_POLL_MS, () => loadInsights(postId, panel, true)));
  }
}

async function loadFeed(ids) {
  const { posts } = await api('GET', `/v1/posts?ids=${ids.join(',')}`);
  const feed = $('#feed');
  feed.replaceChildren();
  state.posts.clear();
  for (const p of posts) {
    const card = renderCard(p);
    state.posts.set(p.post_id, { view: p, card, confirmed: p.viewer_has_liked, timer: null, inflight: false, likedAt: 0 });
    feed.append(card);
  }
}

// Optimistic like: flip now, send the final state after 300 ms of quiet, roll back on failure.
function toggleLike(postId) {
  const s = state.posts.get(postId);
  const v = s.view;
  v.viewer_has_liked = !v.viewer_has_liked;
  if (v.like_count !== null) {
    v.like_count += v.viewer_has_liked ? 1 : -1;
    v.like_count_text = countText(v.like_count);
  }
  if (v.viewer_has_liked && !v.liked_by.includes(state.me.username) && v.liked_by.length === 0) {
    v.liked_by = [state.me.username];
  }
  renderMeta(s.card, v);
  s.likedAt = Date.now();
  clearTimeout(s.timer);
  s.timer = setTimeout(() => { s.timer = null; sendLike(postId); }, 300);
}

async function sendLike(postId) {
  const s = state.posts.get(postId);
  if (s.inflight || s.timer) return; // re-checked when the request in flight settles
  const want = s.view.viewer_has_liked;
  if (want === s.confirmed) return;
  s.inflight = true;
  try {
    const r = await api(want ? 'PUT' : 'DELETE', `/v1/posts/${postId}/like`);
    s.confirmed = r.liked;
    s.likedAt = Date.now();
  } catch (e) {
    // Roll back to what the server has.
    const v = s.view;
    if (v.viewer_has_liked !== s.confirmed) {
      v.viewer_has_liked = s.confirmed;
      if (v.like_count !== null) {
        v.like_count += s.confirmed ? 1 : -1;
        v.like_count_text = countText(v.like_count);
      }
      renderMeta(s.card, v);
    }
    toast(want ? `Couldn't like the post: ${e.message}` : `Couldn't unlike the post: ${e.message}`);
  } finally {
    s.inflight = false;
  }
  // The viewer toggled again while the request was in flight: send the final state.
  if (s.view.viewer_has_liked !== s.confirmed) sendLike(postId);
}

// ---------- settings ----------

async function initSettings(ids) {
  const box = $('#hide-counts');
  try {
    const s = await api('GET', '/v1/me/settings');
    box.checked = !!s.hide_like_counts;
  } catch { /* settings are optional */ }
  box.addEventListener('change', async () => {
    try {
      await api('PUT', '/v1/me/settings', { hide_like_counts: box.checked });
      await loadFeed(ids);
    } catch (e) {
      box.checked = !box.checked;
      toast(`Couldn't save the setting: ${e.message}`);
    }
  });
}

// ---------- viral panel ----------

function initViral() {
  if (!state.world) return;
  const id = state.world.viral_post_id;
  $('#viral').hidden = false;
  let until = 0;
  let last = null;
  const poll = async () => {
    try {
      const v = await api('GET', `/v1/posts/${id}`);
      const n = v.like_count;
      $('#viral-count').textContent = n === null ? 'hidden' : n.toLocaleString('en-US');
      $('#viral-text').textContent = v.like_count_text ?? 'hidden';
      const s = state.posts.get(id);
      if (s && !s.timer && !s.inflight && Date.now() - s.likedAt >= OWN_LIKE_GRACE_MS && n !== last) {
        s.view.like_count = v.like_count;
        s.view.like_count_text = v.like_count_text;
        renderMeta(s.card, s.view);
      }
      last = n;
    } catch { /* keep polling */ }
    setTimeout(poll, Date.now() < until ? 250 : 2000);
  };
  poll();
  $('#storm').addEventListener('click', async () => {
    const r = await fetch('/demo/storm?count=1500', { method: 'POST' });
    if (!r.ok) { toast('The storm did not start'); return; }
    toast('1,500 likes on their way…');
    until = Date.now() + 8000;
  });
}

// ---------- comments sheet ----------

const sheet = { post: null, order: 'top', cursor: null, opener: null, replyTo: null, loading: false };

function postView() { return state.posts.get(sheet.post)?.view; }

function commentItem(c, isReply) {
  const mine = c.author_id === state.me.id;
  const pv = postView();
  const postAuthor = pv && pv.author_id === state.me.id;
  const deleted = c.status === 'deleted';
  const like = h('button', {
    class: 'icon clike', 'aria-pressed': String(c.viewer_has_liked),
    'aria-label': c.viewer_has_liked ? 'Unlike comment' : 'Like comment', disabled: deleted,
  }, icon('heart', { size: 16, cls: 'ico heart' }));
  const likeCount = h('span', { class: 'muted' }, c.like_count > 0 ? `${c.like_count}` : '');
  like.addEventListener('click', async () => {
    li.likedAt = Date.now();
    const was = c.viewer_has_liked;
    c.viewer_has_liked = !was;
    c.like_count += was ? -1 : 1;
    const paint = () => {
      like.setAttribute('aria-pressed', String(c.viewer_has_liked));
      like.setAttribute('aria-label', c.viewer_has_liked ? 'Unlike comment' : 'Like comment');
      likeCount.textContent = c.like_count > 0 ? `${c.like_count}` : '';
    };
    paint();
    try {
      await api(was ? 'DELETE' : 'PUT', `/v1/comments/${c.comment_id}/like`);
    } catch (e) {
      c.viewer_has_liked = was;
      c.like_count += was ? 1 : -1;
      paint();
      toast(`Couldn't like the comment: ${e.message}`);
    }
  });
  const tools = h('div', { class: 'tools' }, h('span', {}, ago(c.created_at)));
  if (!deleted) {
    tools.append(h('button', { class: 'linkish', onclick: () => startReply(c) }, 'Reply'));
    if (mine || postAuthor) {
      tools.append(h('button', {
        class: 'linkish', onclick: async () => {
          if (!confirm('Delete this comment?')) return;
          try { await api('DELETE', `/v1/comments/${c.comment_id}`); li.remove(); toast('Comment deleted'); }
          catch (e) { toast(`Couldn't delete: ${e.message}`); }
        },
      }, 'Delete'));
    }
    if (!mine) {
      tools.append(h('button', {
        class: 'linkish', onclick: async () => {
          try { await api('POST', `/v1/comments/${c.comment_id}/reports`, { reason: 'spam' }); toast('Thanks, we will take a look'); }
          catch (e) { toast(`Couldn't report: ${e.message}`); }
        },
      }, 'Report'));
    }
    if (postAuthor && !isReply) {
      tools.append(h('button', {
        class: 'linkish', onclick: async () => {
          try {
            await api(c.pinned ? 'DELETE' : 'PUT', `/v1/posts/${c.post_id}/pins/${c.comment_id}`);
            toast(c.pinned ? 'Unpinned' : 'Pinned');
            loadComments(true);
          } catch (e) { toast(`Couldn't pin: ${e.message}`); }
        },
      }, c.pinned ? 'Unpin' : 'Pin'));
    }
    if (postAuthor && (c.status === 'pending' || c.status === 'restricted')) {
      tools.append(h('button', {
        class: 'linkish', onclick: async () => {
          try { await api('POST', `/v1/comments/${c.comment_id}/approve`); toast('Approved'); loadComments(true); }
          catch (e) { toast(`Couldn't approve: ${e.message}`); }
        },
      }, 'Approve'));
    }
  }
  const mention = c.reply_to_user_id ? h('span', { class: 'muted' }, `@${username(c.reply_to_user_id)} `) : null;
  const li = h('li', { class: 'comment', 'data-testid': `comment-${c.comment_id}`, 'data-sig': commentSig(c) },
    h('div', { class: 'line' },
      h('div', { class: 'body' },
        h('b', {}, deleted ? '' : c.author_username),
        c.pinned ? h('span', { class: 'tag' }, 'Pinned') : null,
        c.status !== 'visible' && !deleted ? h('span', { class: 'tag warn' }, c.status.replace(/_/g, ' ')) : null,
        ' ', mention, deleted ? h('i', { class: 'muted' }, 'Comment deleted') : h('span', { class: 'text', dir: 'auto' }, c.text),
        tools),
      like, likeCount));
  li.comment = c;
  li.paintLikes = (n, liked) => {
    c.like_count = n;
    c.viewer_has_liked = liked;
    like.setAttribute('aria-pressed', String(liked));
    like.setAttribute('aria-label', liked ? 'Unlike comment' : 'Like comment');
    likeCount.textContent = n > 0 ? `${n}` : '';
  };
  if (!isReply) {
    const replies = h('ul', { class: 'replies', 'aria-label': 'Replies' });
    li.append(replies);
    li.repliesList = replies;
    li.replyState = { cursor: null, loaded: 0, total: c.reply_count };
    if (c.reply_count > 0) {
      const more = h('button', { class: 'linkish view-replies' });
      const label = () => { more.textContent = `View ${li.replyState.total - li.replyState.loaded} more replies`; };
      label();
      li.relabel = label;
      more.addEventListener('click', async () => {
        more.disabled = true;
        try {
          const q = li.replyState.cursor ? `?cursor=${encodeURIComponent(li.replyState.cursor)}` : '';
          const page = await api('GET', `/v1/comments/${c.comment_id}/replies${q}`);
          for (const r of page.items) { replies.append(commentItem(r, true)); li.replyState.loaded++; }
          li.replyState.cursor = page.next_cursor;
          if (!page.next_cursor) more.remove(); else label();
        } catch (e) { toast(`Couldn't load replies: ${e.message}`); }
        more.disabled = false;
      });
      li.append(more);
    }
  }
  return li;
}

/** What a comment's element shows, apart from its likes and reply count (updated in place). */
function commentSig(c) {
  return JSON.stringify([c.status, c.text, c.pinned, c.author_username, c.reply_to_user_id]);
}

/**
 * Read the open sheet again (as many comments as are loaded, and a page more) and bring the
 * list in line: new comments appear, hidden or deleted ones leave, changed ones are drawn
 * again; untouched ones stay as they are (their replies open, the focus where it was).
 */
async function refreshSheet() {
  if ($('#sheet').hidden || sheet.loading || !sheet.post) return;
  const list = $('#comments');
  const shown = [...list.children].filter((li) => li.comment);
  const post = sheet.post;
  const order = sheet.order;
  sheet.loading = true;
  let page;
  try {
    const limit = Math.min(100, Math.max(10, shown.filter((li) => !li.local).length + 10));
    page = await api('GET', `/v1/posts/${post}/comments?${new URLSearchParams({ order, limit: String(limit) })}`);
  } finally {
    sheet.loading = false;
  }
  if ($('#sheet').hidden || sheet.post !== post || sheet.order !== order) return;
  const focused = document.activeElement;
  const byId = new Map(shown.map((li) => [li.comment.comment_id, li]));
  const want = page.items.map((c) => {
    const li = byId.get(c.comment_id);
    if (!li) return commentItem(c, false);
    if (li.dataset.sig !== commentSig(c)) {
      const fresh = commentItem(c, false);
      if (li.replyState?.loaded) { // keep the replies already open
        fresh.repliesList.replaceWith(li.repliesList);
        fresh.repliesList = li.repliesList;
        fresh.replyState = { ...li.replyState, total: c.reply_count };
        fresh.querySelector('.view-replies')?.remove();
      }
      return fresh;
    }
    if (!(Date.now() - (li.likedAt || 0) < 3000)) li.paintLikes(c.like_count, c.viewer_has_liked);
    if (li.replyState && c.reply_count !== li.replyState.total) {
      li.replyState.total = c.reply_count;
      li.relabel?.();
    }
    return li;
  });
  const keep = new Set(want);
  // Comments posted here that the page read does not reach (another order) stay on top.
  const local = shown.filter((li) => li.local && !keep.has(li) && !page.items.some((c) => c.comment_id === li.comment.comment_id));
  const next = [...local, ...want];
  for (const li of shown) if (!next.includes(li)) li.remove();
  list.querySelector('.empty')?.remove();
  let at = list.firstElementChild;
  for (const li of next) {
    if (li === at) { at = at.nextElementSibling; continue; }
    list.insertBefore(li, at);
  }
  if (!next.length) list.append(h('li', { class: 'muted empty' }, 'No comments yet. Start the conversation.'));
  sheet.cursor = page.next_cursor;
  $('#load-more').hidden = !page.next_cursor;
  if (focused && focused.isConnected && document.activeElement !== focused) focused.focus({ preventScroll: true });
}

function startReply(c) {
  const top = c.parent_id || c.comment_id;
  sheet.replyTo = { parent: c.comment_id, top };
  const r = $('#replying');
  r.hidden = false;
  r.querySelector('span').textContent = `Replying to @${c.author_username}`;
  const input = $('#comment-input');
  input.value = `@${c.author_username} `;
  input.focus();
}

function cancelReply() {
  sheet.replyTo = null;
  $('#replying').hidden = true;
}

async function loadComments(reset) {
  if (sheet.loading) return;
  sheet.loading = true;
  const list = $('#comments');
  if (reset) { list.replaceChildren(); sheet.cursor = null; }
  try {
    const q = new URLSearchParams({ order: sheet.order, limit: '10' });
    if (sheet.cursor) q.set('cursor', sheet.cursor);
    const page = await api('GET', `/v1/posts/${sheet.post}/comments?${q}`);
    for (const c of page.items) list.append(commentItem(c, false));
    if (reset && !page.items.length) list.append(h('li', { class: 'muted empty' }, 'No comments yet. Start the conversation.'));
    sheet.cursor = page.next_cursor;
    $('#load-more').hidden = !page.next_cursor;
  } catch (e) {
    toast(`Couldn't load comments: ${e.message}`);
  } finally {
    sheet.loading = false;
  }
}

function openSheet(postId, opener) {
  sheet.post = postId;
  sheet.opener = opener;
  cancelReply();
  $('#sheet').hidden = false;
  $('#sheet-backdrop').hidden = false;
  loadComments(true);
  $('#comment-input').focus();
}

function closeSheet() {
  $('#sheet').hidden = true;
  $('#sheet-backdrop').hidden = true;
  if (sheet.opener) sheet.opener.focus();
}

function initSheet() {
  $('#sheet-close').addEventListener('click', closeSheet);
  $('#sheet-backdrop').addEventListener('click', closeSheet);
  $('#cancel-reply').addEventListener('click', cancelReply);
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape' && !$('#sheet').hidden) closeSheet(); });
  for (const b of document.querySelectorAll('.order button')) {
    b.addEventListener('click', () => {
      sheet.order = b.dataset.order;
      for (const o of document.querySelectorAll('.order button')) o.setAttribute('aria-pressed', String(o === b));
      loadComments(true);
    });
  }
  $('#load-more').addEventListener('click', () => loadComments(false));
  // Infinite scroll: load the next page when the list is scrolled near its end.
  $('#comments').addEventListener('scroll', (e) => {
    const el = e.currentTarget;
    if (sheet.cursor && el.scrollTop + el.clientHeight > el.scrollHeight - 80) loadComments(false);
  });
  $('#comment-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const input = $('#comment-input');
    const text = input.value.trim();
    if (!text) return;
    const body = { text };
    if (sheet.replyTo) body.parent_id = sheet.replyTo.parent;
    // One Idempotency-Key per draft: sending the same draft again after a failure (a lost
    // answer, a timeout) reuses it, so the server creates the comment at most once.
    const draft = `${sheet.post}|${body.parent_id || ''}|${text}`;
    if (!sheet.draftKey || sheet.draftKey.draft !== draft) sheet.draftKey = { draft, key: newKey() };
    input.disabled = true;
    try {
      const c = await api('POST', `/v1/posts/${sheet.post}/comments`, body, { 'Idempotency-Key': sheet.draftKey.key });
      sheet.draftKey = null;
      input.value = '';
      const list = $('#comments');
      list.querySelector('.empty')?.remove();
      if (c.parent_id) {
        const parent = list.querySelector(`[data-testid="comment-${c.parent_id}"]`);
        if (parent && parent.repliesList) parent.repliesList.append(commentItem(c, true));
        else {
          const li = commentItem(c, true);
          li.local = true;
          list.prepend(li);
        }
      } else {
        const li = commentItem(c, false);
        li.local = true;
        list.prepend(li);
      }
      cancelReply();
    } catch (err) {
      toast(`Couldn't post the comment: ${err.message}`);
    } finally {
      input.disabled = false;
      input.focus();
    }
  });
}

// ---------- notifications ----------

const notif = { items: new Map(), seen: 0, lastEventId: null };

function seenKey() { return `likewise.seen.${state.me.id}`; }

function renderBell() {
  const unread = [...notif.items.values()].filter((n) => Date.parse(n.updated_at) > notif.seen).length;
  const badge = $('#unread');
  badge.textContent = String(unread);
  badge.classList.toggle('zero', unread === 0);
  $('#bell').setAttribute('aria-label', `Notifications, ${unread} unread`);
  const list = $('#notif-list');
  list.replaceChildren(...[...notif.items.values()]
    .sort((a, b) => Date.parse(b.updated_at) - Date.parse(a.updated_at))
    .map((n) => h('li', { class: Date.parse(n.updated_at) > notif.seen ? 'fresh' : '', 'data-testid': 'notification' },
      n.text, ' ', h('span', { class: 'muted' }, ago(n.updated_at)))));
  if (!list.children.length) list.append(h('li', { class: 'muted' }, 'Nothing yet.'));
}

function upsert(n) {
  if (n.actor_count === 0) notif.items.delete(n.id);
  else notif.items.set(n.id, n);
  renderBell();
}

// EventSource cannot send an Authorization header, so read the SSE stream with fetch().
async function stream() {
  for (let delay = 1000; ; delay = Math.min(delay * 2, 15000)) {
    try {
      const headers = { Authorization: `Bearer ${state.token}`, Accept: 'text/event-stream' };
      if (notif.lastEventId) headers['Last-Event-ID'] = notif.lastEventId;
      const res = await fetch('/v1/me/notifications/stream', { headers });
      if (!res.ok || !res.body) throw new Error(`stream: HTTP ${res.status}`);
      delay = 1000;
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value.replace(/\r\n?/g, '\n');
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          let event = 'message';
          let data = '';
          for (const line of block.split('\n')) {
            if (line.startsWith(':')) continue;
            const [k, ...rest] = line.split(':');
            const v = rest.join(':').replace(/^ /, '');
            if (k === 'event') event = v;
            else if (k === 'data') data += (data ? '\n' : '') + v;
            else if (k === 'id') notif.lastEventId = v;
          }
          if (event === 'notification' && data) {
            try { upsert(JSON.parse(data)); } catch { /* ignore a bad event */ }
          }
        }
      }
    } catch { /* reconnect below */ }
    await new Promise((r) => setTimeout(r, delay));
  }
}

async function initNotifications() {
  notif.seen = Number(localStorage.getItem(seenKey()) || 0);
  const bell = $('#bell');
  const panel = $('#notif-panel');
  bell.addEventListener('click', () => {
    const open = panel.hidden;
    panel.hidden = !open;
    bell.setAttribute('aria-expanded', String(open));
    if (open) {
      notif.seen = Date.now();
      localStorage.setItem(seenKey(), String(notif.seen));
      renderBell();
    }
  });
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && !panel.hidden) { panel.hidden = true; bell.setAttribute('aria-expanded', 'false'); bell.focus(); }
  });
  try {
    const page = await api('GET', '/v1/me/notifications?limit=20');
    for (const n of page.items) notif.items.set(n.id, n);
  } catch { /* the stream still works */ }
  renderBell();
  stream();
}

// ---------- start ----------

async function main() {
  initSheet();
  let ids;
  try {
    ids = await signIn();
  } catch (e) {
    toast(`Sign-in failed: ${e.message}`);
    return;
  }
  if (!ids || !ids.length) return;
  await loadFeed(ids).catch((e) => toast(`Couldn't load the feed: ${e.message}`));
  initSettings(ids);
  initViral();
  initNotifications();
  every(COUNTS_POLL_MS, refreshOnScreen);
  const sheetPoll = every(SHEET_POLL_MS, refreshSheet);
  onBroadcast((msg) => {
    if (msg?.type !== 'comment-moderated') return;
    refreshPost(msg.post_id).catch(() => {});
    if (!$('#sheet').hidden && sheet.post === msg.post_id) sheetPoll.now();
  });
  document.body.dataset.ready = 'true';
}

main();
