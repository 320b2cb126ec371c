// gpumesh dashboard. Vanilla JS, no dependencies and no request beyond the
// node it came from: it reads the node's API (/v1/status, /v1/peers,
// /v1/info, /v1/jobs, /v1/offers, /v1/jobs/{id}, /v1/jobs/{id}/logs),
// cancels and scales jobs for their owner, and follows /v1/events, a
// stream of server-sent events read with fetch (EventSource cannot send the
// Authorization header a token needs).
//
// Everything a peer or a job owner wrote (IDs, models, regions, reasons,
// logs) reaches the page as text nodes, never as HTML.
'use strict';
(() => {
  const TOKEN_KEY = 'gpumesh.token';
  const FEED_MAX = 100;       // events kept in the activity feed
  const JOBS_MAX = 60;        // job rows shown on the overview
  const POLL_MS = 5000;       // refresh between events, for the windowed figures
  const LOG_MAX = 1 << 20;    // characters of log kept on screen

  // A link may carry the token (?token=…, as `gpumesh demo` prints it): it
  // is kept for this tab and taken out of the address bar.
  const linked = new URLSearchParams(location.search).get('token');
  if (linked) {
    sessionStorage.setItem(TOKEN_KEY, linked);
    history.replaceState(null, '', location.pathname + location.hash);
  }

  const state = {
    token: sessionStorage.getItem(TOKEN_KEY) || '',
    status: null,
    peers: [],
    jobs: [],
    owner: '',          // the owner the token authenticates as ('' for none: no jobs shown)
    offers: null,       // GET /v1/offers, or {error} when the node lists none
    feed: [],
    route: { page: 'overview' },
    job: null,
    changed: new Set(), // "job:ID" / "peer:ID" rows to flash on next render
  };

  class AuthError extends Error {}

  // ---- DOM helpers -------------------------------------------------------

  const $ = (id) => document.getElementById(id);

  // h builds an element; attrs.text sets its text; children are nodes or
  // strings (always inserted as text).
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = v;
      else el.setAttribute(k, v);
    }
    for (const k of kids.flat()) {
      if (k === null || k === undefined || k === false) continue;
      el.append(k instanceof Node ? k : String(k));
    }
    return el;
  }

  function fill(el, ...kids) {
    el.replaceChildren(...kids.flat().filter((k) => k !== null && k !== undefined));
  }

  const cssState = (s) => String(s || '').toLowerCase().replace(/[^a-z_-]/g, '');
  const badge = (s) => h('span', { class: 'badge s-' + cssState(s), text: s || '?' });

  function short(id) {
    id = String(id || '');
    return id.length > 18 ? id.slice(0, 8) + '…' + id.slice(-6) : id;
  }

  function peerLabel(id) {
    return h('span', { class: 'mono', title: id, text: short(id) });
  }

  function jobLink(id) {
    return h('a', { class: 'mono', href: '#/job/' + encodeURIComponent(id), title: id, text: short(id) });
  }

  function fmtDuration(sec) {
    sec = Math.max(0, Math.round(sec || 0));
    if (sec < 60) return sec + 's';
    if (sec < 3600) return Math.floor(sec / 60) + 'm' + String(sec % 60).padStart(2, '0') + 's';
    if (sec < 172800) return Math.floor(sec / 3600) + 'h' + String(Math.floor(sec / 60) % 60).padStart(2, '0') + 'm';
    return Math.floor(sec / 86400) + 'd' + (Math.floor(sec / 3600) % 24) + 'h';
  }

  function fmtLatency(sec) {
    if (!sec) return '–';
    if (sec < 1) return Math.round(sec * 1000) + ' ms';
    if (sec < 60) return sec.toFixed(2) + ' s';
    return fmtDuration(sec);
  }

  function fmtRate(b) {
    b = b || 0;
    if (b < 1000) return b.toFixed(0) + ' B/s';
    if (b < 1e6) return (b / 1e3).toFixed(1) + ' kB/s';
    if (b < 1e9) return (b / 1e6).toFixed(1) + ' MB/s';
    return (b / 1e9).toFixed(1) + ' GB/s';
  }

  const plural = (n, noun) => `${n} ${noun}${n === 1 ? '' : 's'}`;

  const fmtMoney = (x) => (x || 0).toFixed(2);

  function parseTime(t) {
    if (!t || t.startsWith('0001-')) return null;
    const d = new Date(t);
    return isNaN(d) ? null : d;
  }

  function fmtTime(t) {
    const d = parseTime(t);
    return d ? d.toLocaleString() : '–';
  }

  function fmtClock(t) {
    const d = parseTime(t) || new Date();
    return d.toLocaleTimeString([], { hour12: false });
  }

  function ago(t) {
    const d = parseTime(t);
    return d ? fmtDuration((Date.now() - d.getTime()) / 1000) : '–';
  }

  const terminal = (s) => s === 'succeeded' || s === 'failed' || s === 'cancelled' || s === 'moved';
  const livePlacement = (s) => s === 'awarded' || s === 'accepted' || s === 'running' || s === 'stopping';

  // ---- API ---------------------------------------------------------------

  async function call(path, opts = {}) {
    const headers = Object.assign({ Accept: 'application/json' }, opts.headers || {});
    if (state.token) headers.Authorization = 'Bearer ' + state.token;
    const resp = await fetch(path, Object.assign({}, opts, { headers, cache: 'no-store' }));
    if (resp.status === 401) {
      askToken(state.token ? 'The node refused that token. Enter the right one.' : null);
      throw new AuthError('token needed');
    }
    if (!resp.ok) {
      let msg = resp.status + ' ' + resp.statusText;
      try {
        const body = await resp.json();
        if (body && body.error) msg = body.error;
      } catch (_) { /* not JSON */ }
      throw new Error(path.split('?')[0] + ': ' + msg);
    }
    return resp;
  }

  const getJSON = async (path) => (await call(path)).json();

  function showError(msg) {
    const el = $('error');
    el.hidden = !msg;
    el.textContent = msg || '';
  }

  // ---- token -------------------------------------------------------------

  function askToken(why) {
    if (why) $('token-why').textContent = why;
    if ($('token-dialog').hidden) {
      $('token-dialog').hidden = false;
      $('token-input').focus();
    }
    setLive(false, 'token needed');
  }

  // askOwnerToken opens the token dialog to trade the page's token (none,
  // or the node's admin token) for the owner's.
  function askOwnerToken() {
    askToken('Enter your owner token: a token of the node\'s --owner-tokens file, which acts as your owner key. It stays in this tab only (session storage).');
  }

  $('token-form').addEventListener('submit', (e) => {
    e.preventDefault();
    state.token = $('token-input').value.trim();
    $('token-input').value = '';
    sessionStorage.setItem(TOKEN_KEY, state.token);
    $('token-dialog').hidden = true;
    state.owner = '';
    restartStream();
    refresh();
  });

  // ---- refresh -----------------------------------------------------------

  let refreshTimer = null;
  let refreshing = false;
  let refreshAgain = false;

  function scheduleRefresh(delay = 200) {
    if (refreshTimer) return;
    refreshTimer = setTimeout(() => {
      refreshTimer = null;
      refresh();
    }, delay);
  }

  async function refresh() {
    if (refreshing) {
      refreshAgain = true;
      return;
    }
    refreshing = true;
    try {
      if (state.route.page === 'job') {
        const id = state.route.id;
        const [st, rec] = await Promise.all([getJSON('/v1/status'), getJSON('/v1/jobs/' + encodeURIComponent(id))]);
        state.status = st;
        if (state.route.page === 'job' && state.route.id === id) {
          state.job = rec;
          renderHeader();
          renderJob();
        }
      } else {
        const sort = $('offers-sort').value;
        const [st, peers, jobs, info, offers] = await Promise.all([
          getJSON('/v1/status'), getJSON('/v1/peers'), getJSON('/v1/jobs'), getJSON('/v1/info'),
          getJSON('/v1/offers?sort=' + encodeURIComponent(sort)).catch((e) => {
            if (e instanceof AuthError) throw e;
            return { error: e.message };
          }),
        ]);
        state.status = st;
        state.peers = (peers && peers.peers) || [];
        state.jobs = (jobs && jobs.jobs) || [];
        state.jobsUnanswered = (jobs && jobs.unanswered) || [];
        state.owner = (info && info.owner) || '';
        state.offers = offers;
        renderHeader();
        renderOverview();
      }
      showError(null);
    } catch (e) {
      if (!(e instanceof AuthError)) showError(e.message);
    } finally {
      refreshing = false;
      if (refreshAgain) {
        refreshAgain = false;
        scheduleRefresh();
      }
    }
  }

  // ---- events ------------------------------------------------------------

  let streamCtl = null;

  function setLive(on, why) {
    const el = $('live');
    el.dataset.live = on ? 'yes' : 'no';
    el.textContent = on ? 'live' : (why || 'reconnecting…');
  }

  function restartStream() {
    if (streamCtl) streamCtl.abort();
    streamCtl = new AbortController();
    followEvents(streamCtl.signal);
  }

  const sleep = (ms, signal) => new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });

  async function followEvents(signal) {
    let backoff = 1000;
    while (!signal.aborted) {
      try {
        const resp = await call('/v1/events', { signal, headers: { Accept: 'text/event-stream' } });
        setLive(true);
        backoff = 1000;
        scheduleRefresh(0); // catch up on what happened while disconnected
        const reader = resp.body.getReader();
        const dec = new TextDecoder();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += dec.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
          let i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            onBlock(buf.slice(0, i));
            buf = buf.slice(i + 2);
          }
        }
      } catch (e) {
        if (e instanceof AuthError || signal.aborted) return;
      }
      setLive(false);
      await sleep(backoff, signal);
      backoff = Math.min(backoff * 2, 10000);
    }
  }

  // onBlock handles one server-sent event block.
  function onBlock(block) {
    let type = 'message';
    const data = [];
    for (const line of block.split('\n')) {
      if (line === '' || line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'event') type = value;
      else if (field === 'data') data.push(value);
    }
    if (data.length === 0) return;
    let ev;
    try {
      ev = JSON.parse(data.join('\n'));
    } catch (_) {
      return;
    }
    ev.type = ev.type || type;
    onEvent(ev);
  }

  function onEvent(ev) {
    ev.seen = Date.now();
    state.feed.unshift(ev);
    if (state.feed.length > FEED_MAX) state.feed.length = FEED_MAX;
    // Apply what the event says at once; the refresh that follows brings
    // the rest (placements, counts, figures).
    if (ev.job && ev.state && ev.type === 'job') {
      const j = state.jobs.find((x) => x.id === ev.job);
      if (j) j.state = ev.state;
      if (state.job && state.job.id === ev.job) state.job.state = ev.state;
      state.changed.add('job:' + ev.job);
    }
    if (ev.peer && ev.state && ev.type === 'member') {
      const p = state.peers.find((x) => x.id === ev.peer);
      if (p) p.state = ev.state;
      state.changed.add('peer:' + ev.peer);
    }
    if (state.route.page === 'job') renderJob();
    else renderOverview();
    scheduleRefresh();
  }

  function eventText(ev) {
    const parts = [];
    if (ev.hidden) parts.push(h('span', { class: 'muted', text: 'a job (its owner\'s token shows which) ' }));
    if (ev.job) parts.push(jobLink(ev.job), ' ');
    if (ev.node) {
      // An attempt on this node's own cards.
      parts.push(`share ${ev.share || 0} on this node: `, h('span', { class: 'mono', text: `${ev.model || '?'}×${ev.cards || 0}` }));
      if (ev.type === 'placement' && ev.price_cny) parts.push(` at ¥${fmtMoney(ev.price_cny)}/card-h`);
      if (ev.type === 'end') {
        parts.push(' ', badge(ev.cause || 'ended'));
        if (ev.exit_code !== undefined && ev.exit_code !== null) parts.push(` exit ${ev.exit_code}`);
      }
      if (ev.epoch) parts.push(' epoch ' + ev.epoch);
      return parts;
    }
    if (ev.peer) parts.push('peer ', peerLabel(ev.peer), ' ');
    if (ev.from && ev.state) parts.push(ev.from, ' → ', badge(ev.state));
    else if (ev.state) parts.push(badge(ev.state));
    if (ev.epoch) parts.push(' epoch ' + ev.epoch);
    if (ev.reason) parts.push(h('span', { class: 'muted', text: ' ' + ev.reason }));
    return parts;
  }

  function feedItem(ev) {
    const fresh = Date.now() - ev.seen < 1500;
    return h('li', { class: cssState(ev.type) + (ev.hidden ? ' hidden' : '') + (fresh ? ' new' : ''), 'data-type': ev.type, 'data-job': ev.job || null },
      h('span', { class: 'when', text: fmtClock(ev.at) }),
      h('span', { class: 'kind', text: ev.type }),
      h('span', { class: 'what' }, eventText(ev)));
  }

  // ---- overview ----------------------------------------------------------

  function renderHeader() {
    const st = state.status;
    if (!st || !st.node) return;
    const n = st.node;
    const facts = [
      h('span', {}, 'node ', h('b', { class: 'mono', title: n.peer_id, text: short(n.peer_id) })),
      h('span', {}, h('b', { text: n.version || '?' })),
      h('span', {}, 'up ', h('b', { text: fmtDuration(n.uptime_seconds) })),
      h('span', {}, 'reachability ', h('b', { text: n.reachability || 'unknown' })),
    ];
    if (n.region) facts.push(h('span', {}, 'region ', h('b', { text: n.region })));
    if (n.coordinator) facts.push(h('span', { text: 'coordinator' }));
    fill($('node-facts'), facts);

    const warnings = st.warnings || [];
    const ul = $('warnings');
    ul.hidden = warnings.length === 0;
    fill(ul, warnings.map((w) => h('li', { text: w })));
  }

  function tile(label, value, detail, key) {
    return h('div', { class: 'tile', 'data-tile': key },
      h('div', { class: 'label', text: label }),
      h('div', { class: 'value', text: value }),
      h('div', { class: 'detail', text: detail }));
  }

  function renderTiles() {
    const st = state.status || {};
    const mesh = st.mesh || {};
    const m = mesh.members || {};
    const c = mesh.cards || {};
    const jobs = (st.jobs && st.jobs.by_state) || {};
    const pl = (st.jobs && st.jobs.placement) || {};
    const rr = (st.jobs && st.jobs.reroutes) || {};
    const g = st.gossip || {};
    const waiting = (jobs.pending || 0) + (jobs.bidding || 0) + (jobs.placing || 0);
    fill($('tiles'),
      tile('members alive', String(m.alive || 0), `${m.suspect || 0} suspect · ${m.dead || 0} dead · ${m.left || 0} left`, 'members'),
      tile('cards free', `${c.free || 0} / ${c.total || 0}`, `${c.busy || 0} busy · ${c.reserved || 0} reserved`, 'cards'),
      tile('jobs running here', String(jobs.running || 0), `coordinated by this node · ${waiting} waiting · ${jobs.rerouting || 0} rerouting`, 'jobs'),
      tile('placement p50', fmtLatency(pl.p50_seconds), `p99 ${fmtLatency(pl.p99_seconds)} · ${pl.count || 0} placed here in ${fmtDuration(pl.window_seconds)}`, 'placement'),
      tile('reroutes', String(rr.count || 0), `last ${fmtDuration(rr.window_seconds)} · median ${fmtLatency(rr.median_seconds)}`, 'reroutes'),
      tile('gossip', `${(g.messages_per_second || 0).toFixed(1)} msg/s`, `${g.mesh_peers || 0} mesh peers · in ${fmtRate(g.bytes_in_per_second)} · out ${fmtRate(g.bytes_out_per_second)}`, 'gossip'));
  }

  function renderCapacity() {
    const rows = ((state.status && state.status.mesh && state.status.mesh.by_model) || []).slice();
    rows.sort((a, b) => (b.total || 0) - (a.total || 0) || String(a.model).localeCompare(String(b.model)));
    const most = Math.max(1, ...rows.map((r) => r.total || 0));
    if (rows.length === 0) {
      fill($('capacity'), h('p', { class: 'empty', text: 'No cards advertised yet.' }));
      return;
    }
    fill($('capacity'), rows.map((r) => {
      const track = h('div', { class: 'bar-track', title: `${r.free} free, ${r.reserved} reserved, ${r.busy} busy` });
      for (const k of ['free', 'reserved', 'busy']) {
        const seg = h('span', { class: k });
        seg.style.width = (100 * (r[k] || 0) / most) + '%';
        track.append(seg);
      }
      return h('div', { class: 'cap-row', 'data-model': r.model },
        h('span', { class: 'model', title: `${r.model} (${r.vendor})`, text: r.model }),
        track,
        h('span', { class: 'counts', text: `${r.free || 0} free / ${r.total || 0}` }));
    }));
  }

  function flashClass(key) {
    if (!state.changed.has(key)) return '';
    return ' changed';
  }

  function renderMembers() {
    const st = state.status || {};
    const m = (st.mesh && st.mesh.members) || {};
    const regions = ((st.mesh && st.mesh.regions) || []).length;
    $('members-summary').textContent = `${plural(state.peers.length, 'member')} · ${plural(regions, 'region')}`;
    const order = { alive: 0, suspect: 1, dead: 2, left: 3 };
    const peers = state.peers.slice().sort((a, b) =>
      (b.self ? 1 : 0) - (a.self ? 1 : 0) || (order[a.state] ?? 9) - (order[b.state] ?? 9) || String(a.id).localeCompare(String(b.id)));
    const tbody = $('members').tBodies[0];
    if (peers.length === 0) {
      fill(tbody, h('tr', {}, h('td', { colspan: 7, class: 'empty', text: m.alive ? 'loading…' : 'No members.' })));
      return;
    }
    fill(tbody, peers.map((p) => h('tr', { 'data-peer': p.id, class: (p.self ? 'self' : '') + flashClass('peer:' + p.id) },
      h('td', {}, peerLabel(p.id), p.self ? h('span', { class: 'muted', text: ' (this node)' }) : null),
      h('td', { class: 'state' }, badge(p.state)),
      h('td', { text: p.region || '' }),
      h('td', { class: 'num', text: p.cards || 0 }),
      h('td', { class: 'num', text: p.free_cards || 0 }),
      h('td', { class: 'mono', text: (p.models || []).map((m) => (p.simulated_models || []).includes(m) ? `${m} (simulated)` : m).join(', ') }),
      h('td', { class: 'num', text: p.rtt_ms ? p.rtt_ms.toFixed(1) + ' ms' : '' }))));
  }

  function renderNodeCards() {
    const cards = (state.status && state.status.node && state.status.node.cards) || [];
    const tbody = $('node-cards').tBodies[0];
    if (cards.length === 0) {
      fill(tbody, h('tr', {}, h('td', { colspan: 5, class: 'empty', text: 'This node offers no cards.' })));
      return;
    }
    fill(tbody, cards.map((c) => h('tr', { 'data-card': c.id },
      h('td', { class: 'mono', text: c.simulated ? `${c.model} (simulated)` : c.model }),
      h('td', { class: 'mono', title: c.id, text: short(c.id) }),
      h('td', {}, badge(c.state)),
      h('td', {}, c.job ? jobLink(c.job) : ''),
      h('td', {}, c.healthy ? badge('ok') : h('span', {}, badge('unhealthy'), ' ', (c.health && c.health.reason) || '')))));
  }

  function earnedText(e) {
    e = e || {};
    return `¥${fmtMoney(e.cny)}`;
  }

  function renderEarnings() {
    const st = state.status || {};
    const e = st.earnings;
    const cards = (st.node && st.node.cards) || [];
    const box = $('earnings-box');
    box.hidden = !e || (cards.length === 0 && !(e.total && e.total.card_seconds));
    if (box.hidden) return;
    const hours = (x) => `${(((x || {}).card_seconds || 0) / 3600).toFixed(1)} card-hours`;
    $('earnings-since').textContent = parseTime(e.since) ? `since ${fmtTime(e.since)}` : 'nothing yet';
    fill($('earnings'),
      tile('today', earnedText(e.today), hours(e.today), 'earned-today'),
      tile('this week', earnedText(e.week), `since Monday · ${hours(e.week)}`, 'earned-week'),
      tile('in all', earnedText(e.total), hours(e.total), 'earned-total'));
    const tbody = $('earnings-models').tBodies[0];
    const rows = e.by_model || [];
    if (rows.length === 0) {
      fill(tbody, h('tr', {}, h('td', { colspan: 4, class: 'empty', text: 'No job has run on these cards yet.' })));
      return;
    }
    fill(tbody, rows.map((r) => h('tr', { 'data-model': r.model },
      h('td', { class: 'mono', text: r.model }),
      h('td', { class: 'num', text: fmtMoney((r.today || {}).cny) }),
      h('td', { class: 'num', text: fmtMoney((r.week || {}).cny) }),
      h('td', { class: 'num', text: fmtMoney((r.total || {}).cny) }))));
  }

  function reliabilityText(r) {
    r = r || {};
    let s = `MTBF ${r.mtbf_seconds ? fmtDuration(r.mtbf_seconds) : '?'}, up ${fmtDuration(r.uptime_seconds)}`;
    if (r.seen) {
      s += `; here ${r.seen.lost} of ${r.seen.lost + r.seen.ended} lost`;
      if (r.seen.mtbf_seconds) s += `, MTBF ${fmtDuration(r.seen.mtbf_seconds)}`;
    }
    return s;
  }

  function renderOffers() {
    const o = state.offers;
    const tbody = $('offers').tBodies[0];
    if (!o || o.error) {
      $('offers-summary').textContent = '';
      fill(tbody, h('tr', {}, h('td', { colspan: 9, class: 'empty', text: o ? o.error : 'loading…' })));
      return;
    }
    const offers = o.offers || [];
    const free = offers.reduce((n, x) => n + (x.free || 0), 0);
    let summary = `${plural(offers.length, 'offer')} · ${plural(free, 'free card')}`;
    if (o.busy_offers) summary += ` · ${o.busy_offers} more with no free card (${plural(o.busy_cards || 0, 'card')} busy)`;
    $('offers-summary').textContent = summary;
    if (offers.length === 0) {
      fill(tbody, h('tr', {}, h('td', { colspan: 9, class: 'empty', text: 'No free card is advertised right now.' })));
      return;
    }
    fill(tbody, offers.map((x) => h('tr', { 'data-offer': x.node + '/' + x.model, class: x.self ? 'self' : '' },
      h('td', { class: 'mono', title: x.vendor, text: x.simulated ? `${x.model} (simulated)` : x.model }),
      h('td', { class: 'num', text: `${x.free}/${x.total}` }),
      h('td', { class: 'num', text: `${Math.floor((x.memory_mib || 0) / 1024)} GiB` }),
      h('td', { class: 'num', text: x.compute_units ? x.compute_units.toFixed(2) : '?' }),
      h('td', { class: 'num', text: fmtMoney(x.price_cny) }),
      h('td', { class: 'num', text: x.price_per_cu_cny ? fmtMoney(x.price_per_cu_cny) : '–' }),
      h('td', { text: reliabilityText(x.reliability) }),
      h('td', { text: x.region || '' }),
      h('td', {}, peerLabel(x.node), x.self ? h('span', { class: 'muted', text: ' (this node)' }) : null))));
  }

  $('offers-sort').addEventListener('change', () => scheduleRefresh(0));

  function placementSummary(rec) {
    const live = (rec.placements || []).filter((p) => livePlacement(p.state));
    if (live.length === 0) return h('span', { class: 'muted', text: rec.reason || '' });
    return live.map((p) => h('div', { 'data-share': p.share },
      peerLabel(p.node), ' ', h('span', { class: 'mono', text: `${p.model}×${(p.cards || []).length}` }), ' ', badge(p.state)));
  }

  function renderJobs() {
    const jobs = state.jobs.slice().sort((a, b) =>
      (terminal(a.state) ? 1 : 0) - (terminal(b.state) ? 1 : 0) ||
      String(b.submitted_at).localeCompare(String(a.submitted_at)));
    const counts = {};
    for (const j of jobs) counts[j.state] = (counts[j.state] || 0) + 1;
    let summary = Object.entries(counts).map(([s, n]) => `${n} ${s}`).join(' · ');
    const silent = state.jobsUnanswered || [];
    if (silent.length) summary += ` · ${plural(silent.length, 'node')} did not answer: jobs only they hold are missing`;
    $('jobs-summary').textContent = summary;
    const tbody = $('jobs').tBodies[0];
    if (jobs.length === 0 && !state.owner) {
      // The node shows jobs to their owner only: this page has no owner's
      // token (none, or the node's admin token).
      const link = `${location.origin}/?token=OWNER_TOKEN`;
      fill(tbody, h('tr', { 'data-empty': 'no-owner' }, h('td', { colspan: 6, class: 'empty' },
        'Jobs are shown to their owner only, and this page has no owner token. Open it as ',
        h('span', { class: 'mono', text: link }),
        ' with a token of the node\'s --owner-tokens file (gpumesh demo prints such a link), or ',
        h('button', { type: 'button', id: 'owner-token-button', text: 'enter your owner token' }), '.')));
      $('owner-token-button').addEventListener('click', askOwnerToken);
      return;
    }
    if (jobs.length === 0) {
      fill(tbody, h('tr', { 'data-empty': 'none' }, h('td', { colspan: 6, class: 'empty', text: 'No jobs yet: gpumesh submit sends one.' })));
      return;
    }
    fill(tbody, jobs.slice(0, JOBS_MAX).map((j) => h('tr', { 'data-job': j.id, class: flashClass('job:' + j.id) },
      h('td', {}, jobLink(j.id), j.spec && j.spec.name ? h('div', { class: 'muted', text: j.spec.name }) : null),
      h('td', { class: 'state' }, badge(j.state)),
      h('td', { class: 'num', text: j.cards || (j.spec && j.spec.cards) || 0 }),
      h('td', {}, placementSummary(j)),
      h('td', { class: 'num', text: fmtMoney(j.cost_cny) }),
      h('td', { text: ago(j.submitted_at) }))));
  }

  function renderFeed(el, events) {
    if (events.length === 0) {
      fill(el, h('li', { class: 'empty', text: 'Waiting for events…' }));
      return;
    }
    fill(el, events.map(feedItem));
  }

  function renderOverview() {
    if (state.route.page !== 'overview') return;
    renderTiles();
    renderCapacity();
    renderMembers();
    renderNodeCards();
    renderEarnings();
    renderJobs();
    renderOffers();
    renderFeed($('feed'), state.feed);
    state.changed.clear();
  }

  // ---- job page ----------------------------------------------------------

  function facts(el, pairs) {
    fill(el, pairs.filter(([, v]) => v !== null && v !== undefined && v !== '').flatMap(([k, v]) =>
      [h('dt', { text: k }), h('dd', {}, v)]));
  }

  function renderJob() {
    const rec = state.job;
    if (!rec || state.route.page !== 'job') return;
    const spec = rec.spec || {};
    $('job-title').textContent = spec.name ? `${rec.id} (${spec.name})` : rec.id;
    fill($('job-state'), badge(rec.state));
    $('job-reason').textContent = rec.reason || '';
    renderControls(rec);
    facts($('job-facts'), [
      ['owner', spec.owner],
      ['kind', spec.kind || 'batch'],
      ['cards', `${rec.cards || spec.cards || 0}` + ((spec.models || []).length ? ` of ${spec.models.join(', ')}` : '')],
      ['command', h('span', { class: 'mono', text: (spec.command || []).join(' ') })],
      ['env', Object.keys(spec.env || {}).join(', ')], // names only: values may be secrets
      ['payload', spec.payload ? h('span', { class: 'mono', text: JSON.stringify(spec.payload) }) : null],
      ['coordinator', rec.coordinator ? peerLabel(rec.coordinator) : null],
      ['term / epoch', `${rec.term || 0} / ${rec.epoch || 0}`],
      ['restarts', rec.restarts || null],
      ['submitted', fmtTime(rec.submitted_at)],
      ['running since', parseTime(rec.running_at) ? fmtTime(rec.running_at) : null],
      ['ended', parseTime(rec.ended_at) ? fmtTime(rec.ended_at) : null],
      ['exit code', rec.exit_code === undefined || rec.exit_code === null ? null : String(rec.exit_code)],
    ]);
    facts($('job-bill'), [
      ['cost', h('b', { 'data-bill': 'cost', text: '¥' + fmtMoney(rec.cost_cny) })],
      ['card-seconds', (rec.card_seconds || 0).toFixed(0) + ` (${((rec.card_seconds || 0) / 3600).toFixed(2)} card-hours)`],
      ['max price', spec.max_price_cny ? `¥${fmtMoney(spec.max_price_cny)} per card-hour` : null],
      ['clearing price', rec.clearing_price_cu ? `¥${fmtMoney(rec.clearing_price_cu)} per compute-unit hour` : null],
    ]);
    const ps = (rec.placements || []).slice().sort((a, b) => a.share - b.share || a.epoch - b.epoch);
    const tbody = $('placements').tBodies[0];
    if (ps.length === 0) {
      fill(tbody, h('tr', {}, h('td', { colspan: 11, class: 'empty', text: rec.reason || 'Not placed yet.' })));
    } else {
      fill(tbody, ps.map((p) => h('tr', { 'data-share': p.share, 'data-epoch': p.epoch },
        h('td', { class: 'num', text: p.share }),
        h('td', { class: 'num', text: p.epoch }),
        h('td', {}, peerLabel(p.node)),
        h('td', { class: 'mono', text: p.simulated ? `${p.model} (simulated)` : p.model }),
        h('td', { class: 'num', text: (p.cards || []).length }),
        h('td', {}, badge(p.state), p.reason ? h('div', { class: 'muted', text: p.reason }) : null),
        h('td', { class: 'num', text: fmtMoney(p.price_cny) }),
        h('td', { text: parseTime(p.started_at) ? fmtClock(p.started_at) : '–' }),
        h('td', { text: parseTime(p.ended_at) ? fmtClock(p.ended_at) : '–' }),
        h('td', { class: 'num', text: (p.card_seconds || 0).toFixed(0) }),
        h('td', { class: 'num', text: fmtMoney(p.cost_cny) }))));
    }
    const shares = [...new Set(ps.map((p) => p.share))];
    if (shares.length === 0) shares.push(0);
    const sel = $('log-share');
    const current = sel.value;
    if (sel.options.length !== shares.length) {
      fill(sel, shares.map((s) => h('option', { value: s, text: s })));
      if (current !== '' && shares.includes(Number(current))) sel.value = current;
    }
    const ex = $('job-explain-box');
    ex.hidden = !rec.explanation;
    if (rec.explanation) $('job-explain').textContent = JSON.stringify(rec.explanation, null, 2);
    renderFeed($('job-feed'), state.feed.filter((e) => e.job === rec.id));
    startLogs(rec);
  }

  // ---- controls ----------------------------------------------------------

  // The page of a job is served to its owner only: its controls act as that
  // owner. Cancel takes two clicks.
  let cancelArmed = false;

  function renderControls(rec) {
    const box = $('job-controls');
    box.hidden = terminal(rec.state);
    if (box.hidden) return;
    const el = (rec.spec || {}).elastic;
    $('scale-box').hidden = !el;
    const input = $('scale-cards');
    if (el) {
      input.min = el.min;
      input.max = el.max;
      // A refresh shows the job's cards, but never over a number the owner
      // has typed and not yet sent: only a value the page itself wrote, on
      // this job's page, is replaced.
      const shown = String(rec.cards || el.min);
      const untouched = input.dataset.job !== rec.id || input.value === '' || input.value === input.dataset.shown;
      if (document.activeElement !== input && untouched) input.value = shown;
      input.dataset.job = rec.id;
      input.dataset.shown = shown;
    }
    $('cancel-job').textContent = cancelArmed ? 'Cancel it: click again' : 'Cancel job';
    $('cancel-job').classList.toggle('armed', cancelArmed);
  }

  async function control(what, path, opts) {
    const msg = $('control-msg');
    msg.textContent = what + '…';
    try {
      const rec = await (await call(path, opts)).json();
      msg.textContent = `${what}: ${rec.state}` + (rec.cards ? `, ${plural(rec.cards, 'card')}` : '');
      if (state.job && state.job.id === rec.id) state.job = rec;
      renderJob();
      scheduleRefresh(0);
    } catch (e) {
      msg.textContent = e instanceof AuthError ? 'token needed' : e.message;
    }
  }

  $('cancel-job').addEventListener('click', () => {
    if (!state.job) return;
    if (!cancelArmed) {
      cancelArmed = true;
      renderControls(state.job);
      return;
    }
    cancelArmed = false;
    control('cancel', '/v1/jobs/' + encodeURIComponent(state.job.id), { method: 'DELETE' });
  });

  $('scale-job').addEventListener('click', () => {
    if (!state.job) return;
    const cards = Number($('scale-cards').value);
    if (!Number.isInteger(cards) || cards < 1) {
      $('control-msg').textContent = 'cards: want a whole number from 1';
      return;
    }
    control('scale', '/v1/jobs/' + encodeURIComponent(state.job.id) + '/scale',
      { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ cards }) });
  });

  // ---- logs --------------------------------------------------------------

  let logCtl = null;
  let logKey = '';

  function stopLogs() {
    if (logCtl) logCtl.abort();
    logCtl = null;
    logKey = '';
  }

  async function startLogs(rec) {
    const share = $('log-share').value || '0';
    const stream = document.querySelector('input[name="log-stream"]:checked').value;
    const follow = !terminal(rec.state);
    const key = `${rec.id}/${share}/${stream}/${follow}`;
    if (key === logKey) return;
    stopLogs();
    logKey = key;
    const ctl = logCtl = new AbortController();
    const pre = $('logs');
    pre.textContent = '';
    const status = $('log-state');
    status.textContent = follow ? 'following…' : 'loading…';
    const url = `/v1/jobs/${encodeURIComponent(rec.id)}/logs?share=${encodeURIComponent(share)}&stream=${stream}` + (follow ? '&follow=1' : '');
    try {
      const resp = await call(url, { signal: ctl.signal, headers: { Accept: 'text/plain' } });
      const reader = resp.body.getReader();
      const dec = new TextDecoder();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        pre.append(dec.decode(value, { stream: true }));
        if (pre.textContent.length > LOG_MAX) pre.textContent = pre.textContent.slice(-LOG_MAX);
        if (atBottom) pre.scrollTop = pre.scrollHeight;
      }
      if (logCtl === ctl) status.textContent = pre.textContent ? 'end of output' : 'no output';
    } catch (e) {
      if (ctl.signal.aborted) return;
      status.textContent = e instanceof AuthError ? 'token needed' : e.message;
      if (logCtl === ctl) logKey = ''; // try again on the next render
    }
  }

  $('log-share').addEventListener('change', () => state.job && startLogs(state.job));
  for (const r of document.querySelectorAll('input[name="log-stream"]')) {
    r.addEventListener('change', () => state.job && startLogs(state.job));
  }

  // ---- routing -----------------------------------------------------------

  function route() {
    const m = location.hash.match(/^#\/job\/(.+)$/);
    if (m) {
      const id = decodeURIComponent(m[1]);
      if (state.route.page !== 'job' || state.route.id !== id) {
        stopLogs();
        state.job = null;
        cancelArmed = false;
        $('control-msg').textContent = '';
        fill($('log-share'));
        $('logs').textContent = '';
      }
      state.route = { page: 'job', id };
    } else {
      stopLogs();
      state.route = { page: 'overview' };
    }
    $('overview').hidden = state.route.page !== 'overview';
    $('job-page').hidden = state.route.page !== 'job';
    document.title = state.route.page === 'job' ? `${state.route.id} · gpumesh` : 'gpumesh';
    refresh();
  }

  window.addEventListener('hashchange', route);
  setInterval(() => {
    if (document.visibilityState === 'visible' && $('token-dialog').hidden) scheduleRefresh(0);
  }, POLL_MS);

  renderFeed($('feed'), []);
  route();
  restartStream();
})();
