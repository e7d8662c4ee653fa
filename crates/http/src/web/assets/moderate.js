// The moderator's page: the review queue (why each comment is held, its reports and appeal)
// with one-click decisions, and the integrity consumer's flags. Decisions are optimistic: the
// comment leaves the list at once and comes back, with a message, if the server refuses.
// The queue is read again every few seconds (new held comments show up), keeping the
// moderator's focus and the decisions still on their way.

import {
  $, h, icon, toast, api, session, loadWorld, demoSignIn, tokenSubject, username, postInfo, linkNav, broadcast, ago,
  every, span,
} from './common.js';

const REASONS = {
  classifier: 'Classifier',
  hidden_words: 'Hidden words',
  near_duplicate: 'Near-duplicate',
  reports: 'Reports',
  restricted: 'Restricted',
  moderator: 'Moderator',
};
const QUEUE_POLL_MS = 5000;
// `decided`: comments decided here (the queue may list them for a moment after the decision);
// `said`: the last decision's message, shown before the count.
const queue = { items: [], cursor: null, more: false, decided: new Set(), said: '' };
const flags = { items: [], cursor: null };

async function signIn() {
  if (await loadWorld()) {
    linkNav(localStorage.getItem('likewise.as'));
    return demoSignIn(session.world.moderator.user_id);
  }
  const token = localStorage.getItem('likewise.service-token');
  if (token) {
    session.token = token;
    const sub = tokenSubject(token);
    session.me = { id: sub, username: `user${sub}` };
    return session.me;
  }
  $('#signin').hidden = false;
  return new Promise(() => {
    $('#signin-form').addEventListener('submit', (e) => {
      e.preventDefault();
      localStorage.setItem('likewise.service-token', $('#signin-token').value.trim());
      location.reload();
    });
  });
}

// ---------- the queue ----------

function reasonOf(item) { return item.held_by || 'none'; }

function visibleItems() {
  const reason = $('#filter-reason').value;
  const appealed = $('#filter-appealed').checked;
  return queue.items.filter((i) => !i.gone && (!reason || reasonOf(i) === reason) && (!appealed || i.appealed));
}

function rejectLabel(item) {
  if (item.status === 'visible') return 'Hide';
  return item.appealed ? 'Reject appeal' : 'Reject';
}

function queueItem(item) {
  const post = postInfo(item.post_id);
  const postText = post ? `${post.author_username}'s post “${post.caption}” (post ${item.post_id})` : `post ${item.post_id}`;
  const headId = `q-${item.comment_id}-h`;
  const tags = h('p', { class: 'tags' },
    h('span', { class: 'tag' }, item.status.replace(/_/g, ' ')),
    item.held_by
      ? h('span', { class: 'tag warn', 'data-testid': 'held-by' }, `Held by: ${REASONS[item.held_by] || item.held_by}`)
      : h('span', { class: 'tag', 'data-testid': 'held-by' }, 'Reported, still shown'),
    h('span', { class: 'tag' }, `${item.report_count} ${item.report_count === 1 ? 'report' : 'reports'}`),
    item.appealed ? h('span', { class: 'tag appeal' }, 'Appealed') : null);
  const approve = h('button', { class: 'approve', 'data-action': 'approve', onclick: () => decide(item, 'approve') },
    icon('check', { size: 16 }), ' Approve');
  const reject = h('button', { class: 'reject', 'data-action': 'hide', onclick: () => decide(item, 'hide') },
    icon(item.status === 'visible' ? 'eyeOff' : 'x', { size: 16 }), ` ${rejectLabel(item)}`);
  return h('li', {
    class: 'qitem', tabindex: '0', 'data-testid': `queue-item-${item.comment_id}`, 'data-id': item.comment_id,
    'aria-labelledby': headId,
  },
  h('p', { class: 'qhead', id: headId }, h('b', {}, item.author_username), ` on ${postText}`,
    h('span', { class: 'muted' }, ` · ${ago(item.created_at)}`)),
  h('blockquote', { class: 'qtext text', dir: 'auto' }, item.text),
  tags,
  item.appealed
    ? h('p', { class: 'appeal' }, h('b', {}, 'Appeal: '),
      item.appeal_message ? h('span', { class: 'text', dir: 'auto' }, `“${item.appeal_message}”`) : h('i', {}, 'no message'))
    : null,
  h('div', { class: 'decide', role: 'group', 'aria-label': 'Decision' }, approve, reject));
}

function renderQueue(focusIndex = null) {
  const list = $('#queue');
  const items = visibleItems();
  list.replaceChildren(...items.map(queueItem));
  if (!items.length) list.append(h('li', { class: 'muted empty' }, 'Nothing awaits a decision here.'));
  const left = queue.items.filter((i) => !i.gone).length;
  // More pages: the number awaiting a decision is at least what is loaded.
  const counted = `${items.length} shown, ${left}${queue.cursor ? '+' : ''} awaiting a decision`;
  $('#queue-count').textContent = queue.said ? `${queue.said} ${counted}` : counted;
  $('#queue-more').hidden = !queue.cursor;
  if (focusIndex !== null) {
    const lis = list.querySelectorAll('li.qitem');
    if (lis.length) lis[Math.min(focusIndex, lis.length - 1)].focus();
    else $('#queue-h').focus();
  }
}

async function loadQueue(more = false) {
  const q = new URLSearchParams({ limit: '100' });
  if (more && queue.cursor) q.set('cursor', queue.cursor);
  const page = await api('GET', `/v1/moderation/queue?${q}`);
  if (!more) queue.items = [];
  queue.items.push(...page.items.filter((i) => !queue.decided.has(i.comment_id)));
  queue.cursor = page.next_cursor;
  if (more) queue.more = true;
  renderQueue();
}

/** Where the focus is in the queue: the item and, if any, its button. */
function queueFocus() {
  const li = document.activeElement?.closest?.('li.qitem');
  return li ? { id: li.dataset.id, action: document.activeElement.dataset?.action || null } : null;
}

function restoreFocus(f) {
  if (!f) return;
  const li = $(`[data-testid="queue-item-${f.id}"]`);
  const el = li && f.action ? li.querySelector(`[data-action="${f.action}"]`) : li;
  if (el && document.activeElement !== el) el.focus({ preventScroll: true });
}

/**
 * Read the first page again: comments held since show up, decided ones leave. Items whose
 * decision is on its way (or done here) stay out; items from later pages stay as loaded.
 */
async function refreshQueue() {
  const page = await api('GET', '/v1/moderation/queue?limit=100');
  const known = new Map(queue.items.map((i) => [i.comment_id, i]));
  const fresh = page.items.filter((i) => !queue.decided.has(i.comment_id)).map((i) => {
    const had = known.get(i.comment_id);
    return had && had.gone ? had : i; // a decision in flight keeps the item out of the list
  });
  const ids = new Set(fresh.map((i) => i.comment_id));
  const inFlight = queue.items.filter((i) => i.gone && !ids.has(i.comment_id) && !queue.decided.has(i.comment_id));
  const later = queue.more ? queue.items.filter((i) => !i.gone && !ids.has(i.comment_id)) : [];
  const next = [...fresh, ...later, ...inFlight];
  const sig = (list) => JSON.stringify(list.map((i) => [i.comment_id, !!i.gone, i.status, i.held_by, i.report_count,
    i.appealed, i.appeal_message, i.text]));
  const before = sig(queue.items);
  queue.items = next;
  if (!queue.more) queue.cursor = page.next_cursor;
  if (sig(next) === before && $('#queue-more').hidden === !queue.cursor) return;
  const f = queueFocus();
  const y = window.scrollY;
  renderQueue();
  window.scrollTo(0, y);
  restoreFocus(f);
}

async function decide(item, action) {
  if (item.gone) return;
  const before = visibleItems().indexOf(item);
  const hadFocus = document.activeElement?.closest?.('li.qitem')?.dataset.id === item.comment_id;
  item.gone = true; // optimistic: it leaves the list now
  renderQueue(hadFocus ? before : null);
  try {
    const c = await api('POST', `/v1/moderation/comments/${item.comment_id}`, { action });
    queue.decided.add(item.comment_id);
    broadcast({ type: 'comment-moderated', post_id: c.post_id, comment_id: c.comment_id, status: c.status });
    const done = action === 'approve' ? 'Approved' : rejectLabel(item) === 'Hide' ? 'Hidden' : 'Rejected';
    queue.said = `${done}: ${item.author_username}'s comment.`; // replaces the previous message
    const f = queueFocus();
    renderQueue();
    restoreFocus(f);
  } catch (e) {
    if (e.status === 404) {
      // The comment no longer exists (its author deleted it): nothing left to decide.
      queue.decided.add(item.comment_id);
      queue.items = queue.items.filter((i) => i !== item);
      queue.said = `${item.author_username}'s comment no longer exists: removed from the queue.`;
      renderQueue();
      toast(`That comment no longer exists (deleted): removed from the queue.`);
      return;
    }
    item.gone = false; // rolled back: it is still awaiting a decision
    renderQueue();
    if (hadFocus) $(`[data-testid="queue-item-${item.comment_id}"]`)?.focus();
    toast(`Couldn't ${action === 'approve' ? 'approve' : rejectLabel(item).toLowerCase()} the comment: ${e.message}`);
  }
}

function onQueueKey(e) {
  if (e.ctrlKey || e.metaKey || e.altKey || e.target.closest('button, input, select')) return;
  const li = e.target.closest('li.qitem');
  if (!li) return;
  const item = queue.items.find((i) => i.comment_id === li.dataset.id);
  const lis = [...$('#queue').querySelectorAll('li.qitem')];
  const at = lis.indexOf(li);
  if (e.key === 'a') decide(item, 'approve');
  else if (e.key === 'r' || e.key === 'h') decide(item, 'hide');
  else if (e.key === 'j' || e.key === 'ArrowDown') lis[Math.min(at + 1, lis.length - 1)].focus();
  else if (e.key === 'k' || e.key === 'ArrowUp') lis[Math.max(at - 1, 0)].focus();
  else return;
  e.preventDefault();
}

// ---------- integrity flags ----------

function evidence(f) {
  const e = f.evidence || {};
  if (e.partners !== undefined) {
    return `${e.partners} partner accounts, ${e.shared_targets} shared targets within ${span(e.span_seconds)}`;
  }
  if (e.likes !== undefined) return `${e.likes} likes in ${e.window_seconds} s (${Math.round(e.likes_per_minute)}/min)`;
  return '';
}

const DECISIONS = { confirm: 'Confirmed', clear: 'Cleared' };

function flagRow(f) {
  const who = username(f.user_id);
  const button = (action, text) => h('button', {
    'data-action': action, 'aria-pressed': String(f.decision === action),
    'aria-label': `${text} ${who}`, onclick: () => decideFlag(f, action),
  }, text);
  return h('tr', { 'data-testid': `flag-${f.user_id}` },
    h('th', { scope: 'row' }, who),
    h('td', { 'data-label': 'Reason' }, f.reason.replace(/_/g, ' ')),
    h('td', { 'data-label': 'Evidence' }, evidence(f)),
    h('td', { 'data-label': 'Flagged' }, ago(f.flagged_at)),
    h('td', { 'data-testid': 'decision', 'data-label': 'Decision' }, f.decision ? DECISIONS[f.decision] : 'Undecided',
      f.likes_discounted ? h('span', { class: 'muted' }, ' (likes discounted)') : null),
    h('td', { class: 'decide' }, button('confirm', 'Confirm'), ' ', button('clear', 'Clear')));
}

function renderFlags() {
  const body = $('#flags');
  body.replaceChildren(...flags.items.map(flagRow));
  if (!flags.items.length) body.append(h('tr', {}, h('td', { colspan: '6', class: 'muted' }, 'No flagged accounts.')));
  $('#flags-more').hidden = !flags.cursor;
}

async function loadFlags(more = false) {
  const q = new URLSearchParams({ limit: '50' });
  if (more && flags.cursor) q.set('cursor', flags.cursor);
  const page = await api('GET', `/v1/moderation/integrity?${q}`);
  if (!more) flags.items = [];
  flags.items.push(...page.items);
  flags.cursor = page.next_cursor;
  renderFlags();
}

async function decideFlag(f, action) {
  const before = { decision: f.decision, likes_discounted: f.likes_discounted };
  const focused = document.activeElement?.dataset?.action;
  const refocus = () => {
    if (focused) $(`[data-testid="flag-${f.user_id}"] [data-action="${focused}"]`)?.focus();
  };
  f.decision = action; // optimistic
  renderFlags();
  refocus();
  try {
    Object.assign(f, await api('POST', `/v1/moderation/integrity/${f.user_id}`, { action }));
  } catch (e) {
    Object.assign(f, before);
    toast(`Couldn't ${action} the flag: ${e.message}`);
  }
  renderFlags();
  refocus();
}

// ---------- start ----------

async function main() {
  $('#filter-reason').addEventListener('change', () => renderQueue());
  $('#filter-appealed').addEventListener('change', () => renderQueue());
  $('#queue').addEventListener('keydown', onQueueKey);
  $('#queue-more').addEventListener('click', () => loadQueue(true).catch((e) => toast(e.message)));
  $('#flags-more').addEventListener('click', () => loadFlags(true).catch((e) => toast(e.message)));
  try {
    const me = await signIn();
    $('#who').textContent = `Signed in as ${me.username} (service role)`;
    await Promise.all([loadQueue(), loadFlags()]);
    every(QUEUE_POLL_MS, refreshQueue);
    document.body.dataset.ready = 'true';
  } catch (e) {
    toast(`Couldn't load the queue: ${e.message}`);
  }
}

main();
