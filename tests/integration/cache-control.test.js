'use strict';
/*
 * Per-request cache controls: Cache-Control no-store / no-cache / max-age,
 * X-Cache-TTL, X-Cache-Mode and X-Cache-Namespace, and 400 for invalid values.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const CACHE_TTL = 3600;
const env = h.environment({proxyArgs: ['--cache-ttl', String(CACHE_TTL)]});

const CHAT = '/v1/chat/completions';
const ENTRY_PATTERN = 'pc:2:e:*';

/* Entry keys that fn's request added to Redis (stored before its answer was sent). */
async function newEntryKeys(fn) {
    const before = new Set(await env.redis.keys(ENTRY_PATTERN));
    await fn();
    const added = (await env.redis.keys(ENTRY_PATTERN)).filter((k) => !before.has(k));
    assert.equal(added.length, 1, `one new ${ENTRY_PATTERN} key in Redis`);
    return added;
}

/*
 * PTTL of the entry fn's request stored with a time to live of ttl seconds:
 * at most ttl, and at least ttl less the time since the request was sent (a
 * fixed margin would be outlasted by a slow enough machine).
 */
async function assertStoredTtl(fn, ttl) {
    const sent = Date.now();
    const [key] = await newEntryKeys(fn);
    const pttl = Number(await env.redis.command('PTTL', key));
    const least = ttl * 1000 - (Date.now() - sent) - 1000; /* the second: clocks' granularity */
    assert.ok(pttl >= least && pttl <= ttl * 1000, `PTTL ${pttl} within [${least}, ${ttl * 1000}]`);
}

h.test('no-store: the answer is fetched but not stored', async () => {
    const body = h.chatBody(h.uniq('no-store'));
    const r = await env.proxy.post(CHAT, body, {'cache-control': 'no-store'});
    assert.equal(r.status, 200);
    h.assertFromUpstream(r, env.mock);
    const calls = env.mock.callCount(CHAT);
    const next = await env.proxy.post(CHAT, body);
    h.assertFromUpstream(next, env.mock);
    assert.equal(env.mock.callCount(CHAT), calls + 1, 'nothing was stored: the upstream is called again');
    h.assertHit(await env.proxy.post(CHAT, body));
});

h.test('no-cache: skips the lookup, fetches and stores the fresh answer (REFRESH)', async () => {
    const body = h.chatBody(h.uniq('no-cache'));
    const first = await env.proxy.post(CHAT, body);
    const calls = env.mock.callCount(CHAT);
    const fresh = await env.proxy.post(CHAT, body, {'cache-control': 'no-cache'});
    assert.equal(fresh.status, 200);
    h.assertFromUpstream(fresh, env.mock, 'REFRESH');
    assert.equal(env.mock.callCount(CHAT), calls + 1);
    assert.notEqual(h.answerSeq(h.chatText(fresh.json)), h.answerSeq(h.chatText(first.json)));

    /* The refreshed answer replaced the old one (stored before it was sent). */
    const after = await env.proxy.post(CHAT, body);
    h.assertHit(after);
    assert.equal(h.chatText(after.json), h.chatText(fresh.json));
});

h.test('max-age: only entries at most N seconds old are served', async () => {
    const body = h.chatBody(h.uniq('max-age'));
    await env.proxy.post(CHAT, body);
    /* The passage of time is the behaviour under test: the entry ages past 1 s (Age says
     * when, in whole seconds counted from the store). */
    const young = await h.waitFor(async () => {
        const r = await env.proxy.post(CHAT, body, {'cache-control': 'max-age=100'});
        h.assertHit(r);
        return Number(r.headers.age) >= 2 ? r : null;
    }, {what: 'the entry to be 2 s old', interval: 100});
    assert.match(String(young.headers.age), /^\d+$/);

    const calls = env.mock.callCount(CHAT);
    const strict = await env.proxy.post(CHAT, body, {'cache-control': 'max-age=1'});
    assert.equal(strict.status, 200);
    assert.notEqual(strict.headers['x-cache-status'], 'HIT', 'a 2 s old entry is too old for max-age=1');
    assert.equal(strict.headers['x-upstream'], `127.0.0.1:${env.mock.port}`);
    assert.equal(env.mock.callCount(CHAT), calls + 1);
});

/*
 * max-age given twice (two Cache-Control lines, a gateway adding its own, or one line): the
 * last one counted, so an answer older than the other was served to a client that asked for
 * at most that age. The strictest counts.
 */
h.test('max-age given twice: the smaller one counts', async () => {
    const body = h.chatBody(h.uniq('max-age twice'));
    h.assertFromUpstream(await env.proxy.post(CHAT, body), env.mock);
    /* any entry is older than 0 s once a millisecond has passed (no-store: it stays) */
    await h.waitFor(async () => (await env.proxy.post(CHAT, body, {'cache-control': 'max-age=0, no-store'}))
        .headers['x-cache-status'] !== 'HIT', {what: 'the entry older than max-age=0'});
    for (const cc of ['max-age=0, max-age=3600', 'max-age=3600, max-age=0', ['max-age=0', 'max-age=3600']]) {
        const r = await env.proxy.post(CHAT, body, {'cache-control': [].concat(cc, 'no-store')});
        assert.equal(r.status, 200, r.text);
        assert.notEqual(r.headers['x-cache-status'], 'HIT', `Cache-Control: ${cc}`);
    }
    h.assertHit(await env.proxy.post(CHAT, body, {'cache-control': 'max-age=3600, max-age=3601'}));
});

/*
 * A directive's argument may be a quoted string (RFC 9111 5.2: recipients accept both forms):
 * max-age="0" was a 400, and a comma inside another directive's quoted argument split it, so
 * x-tag="a, no-store" was read as no-store (the answer was not kept).
 */
h.test('Cache-Control arguments in quotes: max-age="N" is max-age=N, a quoted comma splits nothing', async () => {
    const body = h.chatBody(h.uniq('quoted cache-control'));
    const first = await env.proxy.post(CHAT, body, {'cache-control': 'x-tag="a, no-store", x-other="no-cache"'});
    assert.equal(first.status, 200, first.text);
    h.assertFromUpstream(first, env.mock, 'MISS');
    h.assertHit(await env.proxy.post(CHAT, body, {'cache-control': 'x-tag="no-cache, b"'}));
    h.assertHit(await env.proxy.post(CHAT, body, {'cache-control': 'max-age="3600"'}));
    await h.waitFor(async () => (await env.proxy.post(CHAT, body, {'cache-control': 'max-age=0, no-store'}))
        .headers['x-cache-status'] !== 'HIT', {what: 'the entry older than max-age=0'});
    const strict = await env.proxy.post(CHAT, body, {'cache-control': 'max-age="0", no-store'});
    assert.equal(strict.status, 200, strict.text);
    assert.notEqual(strict.headers['x-cache-status'], 'HIT', 'max-age="0" is max-age=0');
    h.assertOpenAIError(await env.proxy.post(CHAT, body, {'cache-control': 'max-age="abc"'}), 400);
    h.assertOpenAIError(await env.proxy.post(CHAT, body, {'cache-control': 'max-age=""'}), 400);
});

h.test('X-Cache-TTL sets the entry\'s time to live in Redis', async () => {
    await assertStoredTtl(() => env.proxy.post(CHAT, h.chatBody(h.uniq('ttl 30')), {'x-cache-ttl': '30'}), 30);
});

h.test('without X-Cache-TTL an entry lives for cache-ttl', async () => {
    await assertStoredTtl(() => env.proxy.post(CHAT, h.chatBody(h.uniq('ttl default'))), CACHE_TTL);
});

h.test('X-Cache-Mode: off bypasses the cache and stores nothing', async () => {
    const body = h.chatBody(h.uniq('mode off'));
    const off = await env.proxy.post(CHAT, body, {'x-cache-mode': 'off'});
    assert.equal(off.status, 200);
    h.assertFromUpstream(off, env.mock, 'BYPASS');
    h.assertFromUpstream(await env.proxy.post(CHAT, body), env.mock, 'MISS');

    /* An entry exists now; mode off still goes upstream. */
    const calls = env.mock.callCount(CHAT);
    h.assertFromUpstream(await env.proxy.post(CHAT, body, {'x-cache-mode': 'off'}), env.mock, 'BYPASS');
    assert.equal(env.mock.callCount(CHAT), calls + 1);
});

h.test('X-Cache-Mode: exact behaves like the default', async () => {
    const body = h.chatBody(h.uniq('mode exact'));
    await env.proxy.post(CHAT, body, {'x-cache-mode': 'exact'});
    h.assertHit(await env.proxy.post(CHAT, body, {'x-cache-mode': 'exact'}));
});

h.test('X-Cache-Namespace separates entries', async () => {
    const body = h.chatBody(h.uniq('namespace'));
    h.assertFromUpstream(await env.proxy.post(CHAT, body, {'x-cache-namespace': 'alpha'}), env.mock);
    h.assertFromUpstream(await env.proxy.post(CHAT, body, {'x-cache-namespace': 'beta'}), env.mock);
    h.assertHit(await env.proxy.post(CHAT, body, {'x-cache-namespace': 'alpha'}));
});

const INVALID_CONTROLS = [
    {'x-cache-ttl': 'abc'},
    {'x-cache-ttl': '-5'},
    {'x-cache-mode': 'sometimes'},
    {'cache-control': 'max-age=abc'},
];

for (const headers of INVALID_CONTROLS) {
    const [name, value] = Object.entries(headers)[0];
    h.test(`invalid ${name}: ${value} is a 400 in the API's shape, nothing is fetched`, async () => {
        const calls = env.mock.callCount();
        const chat = await env.proxy.post(CHAT, h.chatBody(h.uniq('invalid control')), headers);
        h.assertOpenAIError(chat, 400);
        const msg = await env.proxy.post('/v1/messages', h.messagesBody(h.uniq('invalid control')), headers);
        h.assertAnthropicError(msg, 400);
        assert.equal(env.mock.callCount(), calls, 'the upstream was not called');
    });
}

h.test('a huge max-age accepts any entry (no overflow), a huge X-Cache-TTL is held to cache-max-ttl', async () => {
    const body = h.chatBody(h.uniq('huge max-age'));
    await env.proxy.post(CHAT, body);
    for (const v of ['9223372036854775807', '99999999999999999999999999'])
        h.assertHit(await env.proxy.post(CHAT, body, {'cache-control': `max-age=${v}`}));
    const [key] = await newEntryKeys(() => env.proxy.post(CHAT, h.chatBody(h.uniq('ttl clamp')),
        {'x-cache-ttl': '999999999999'}));
    const pttl = await env.redis.command('PTTL', key);
    /* cache-max-ttl defaults to 30 days. */
    assert.ok(pttl > 0 && pttl <= 30 * 86400 * 1000, `PTTL ${pttl} held to cache-max-ttl`);
});

h.test('Pragma: no-cache (HTTP/1.0) refreshes like Cache-Control: no-cache', async () => {
    const body = h.chatBody(h.uniq('pragma'));
    await env.proxy.post(CHAT, body);
    h.assertFromUpstream(await env.proxy.post(CHAT, body, {pragma: 'no-cache'}), env.mock, 'REFRESH');
    /* Cache-Control, when present, is what counts. */
    h.assertHit(await env.proxy.post(CHAT, body, {pragma: 'no-cache', 'cache-control': 'max-age=60'}));
});

h.test('the query string is part of the key (it reaches the upstream too)', async () => {
    const body = h.chatBody(h.uniq('query key'));
    const v1 = '/v1/chat/completions?api-version=2024-01-01';
    const v2 = '/v1/chat/completions?api-version=2099-01-01';
    h.assertFromUpstream(await env.proxy.post(v1, body), env.mock);
    h.assertFromUpstream(await env.proxy.post(v2, body), env.mock);
    h.assertHit(await env.proxy.post(v1, body));
    h.assertFromUpstream(await env.proxy.post(CHAT, body), env.mock);
});

/*
 * Cache-Control is a list: a client (or a gateway on its way) may send it on several lines,
 * which mean the same as one line joined with commas (RFC 9110, section 5.3). Only the first
 * line was read: a no-store or no-cache on the second was ignored, and the answer the client
 * asked not to keep was stored, or a cached answer served to a client that asked for a fresh one.
 */
h.test('Cache-Control sent on several lines: every line counts', async () => {
    const body = h.chatBody(h.uniq('cache-control lines'));
    h.assertFromUpstream(await env.proxy.post(CHAT, body, {'cache-control': ['max-age=600', 'no-store']}), env.mock);
    h.assertFromUpstream(await env.proxy.post(CHAT, body), env.mock, 'MISS');
    const cached = await env.proxy.post(CHAT, body);
    h.assertHit(cached);
    const fresh = await env.proxy.post(CHAT, body, {'cache-control': ['max-age=600', 'no-cache']});
    h.assertFromUpstream(fresh, env.mock, 'REFRESH');
    /* the second line's max-age is read too: an invalid one is a 400 there as on the first */
    const bad = await env.proxy.post(CHAT, body, {'cache-control': ['no-transform', 'max-age=abc']});
    h.assertOpenAIError(bad, 400);
});
