// The notification settings page: the four kinds, each all / following / off, saved at once
// (optimistically, rolled back with a message when the server refuses).

import { $, h, toast, api, session, loadWorld, demoSignIn, chosenUser, tokenSubject, linkNav } from './common.js';

const KINDS = [
  ['post_liked', 'Likes on your posts'],
  ['comment_liked', 'Likes on your comments'],
  ['commented', 'Comments on your posts'],
  ['replied', 'Replies to your comments'],
];
const CHOICES = [
  ['all', 'Everyone'],
  ['following', 'People you follow'],
  ['off', 'Off'],
];

async function signIn() {
  if (await loadWorld()) {
    const me = await demoSignIn(chosenUser());
    localStorage.setItem('likewise.as', me.id);
    linkNav(me.id);
    return me;
  }
  const token = localStorage.getItem('likewise.token');
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
      localStorage.setItem('likewise.token', $('#signin-token').value.trim());
      location.reload();
    });
  });
}

function render(settings) {
  const form = $('#notif-settings');
  form.replaceChildren(...KINDS.map(([kind, label]) => {
    const fs = h('fieldset', { class: 'kind', 'data-kind': kind }, h('legend', {}, label));
    for (const [value, text] of CHOICES) {
      const id = `${kind}-${value}`;
      const input = h('input', {
        type: 'radio', name: kind, id, value, checked: settings[kind] === value,
        'data-testid': `setting-${kind}-${value}`,
      });
      input.addEventListener('change', () => save(kind, value, settings));
      fs.append(h('span', { class: 'choice' }, input, h('label', { for: id }, text)));
    }
    return fs;
  }));
  form.hidden = false;
}

async function save(kind, value, settings) {
  const before = settings[kind];
  settings[kind] = value; // the radio is already checked: optimistic
  $('#saved').textContent = 'Saving…';
  try {
    const now = await api('PUT', '/v1/me/notification-settings', { [kind]: value });
    Object.assign(settings, now);
    $('#saved').textContent = 'Saved.';
  } catch (e) {
    settings[kind] = before;
    const back = document.getElementById(`${kind}-${before}`);
    if (back) back.checked = true;
    $('#saved').textContent = '';
    toast(`Couldn't save the setting: ${e.message}`);
  }
}

async function main() {
  $('#notif-settings').addEventListener('submit', (e) => e.preventDefault());
  try {
    const me = await signIn();
    $('#who').textContent = `Signed in as ${me.username}`;
    render(await api('GET', '/v1/me/notification-settings'));
    document.body.dataset.ready = 'true';
  } catch (e) {
    toast(`Couldn't load the settings: ${e.message}`);
  }
}

main();
