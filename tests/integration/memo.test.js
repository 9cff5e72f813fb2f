'use strict';
/*
 * The worker's memo of request bodies (pc_memo.h): a body read before, with
 * the same key inputs, takes its keys from the memo instead of being parsed
 * again (request_memo_hits). Whatever splits the cache - credential,
 * namespace, cache-key-headers, the query, a byte of the body - splits the
 * memo too, and a memo answer that then misses the cache still goes
 * upstream whole.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const ADMIN_TOKEN = 'admin-token-for-memo';
/* One worker: the memo is per worker, and the counts below are exact. */
const env = h.environment({proxyArgs: ['--admin-token', ADMIN_TOKEN, '--workers', '1']});
const CHAT = '/v1/chat/completions';

async function memoHits() {
    return (await env.proxy.stats()).request_memo_hits;
}

/* Post and report whether the memo answered (its counter moved by exactly that much). */
async function postCounted(body, headers, path = CHAT) {
    const before = await memoHits();
    const res = await env.proxy.post(path, body, headers);
    assert.equal(res.status, 200, res.text);
    return {res, memo: (await memoHits()) - before};
}

function flushAll() {
    return h.request(env.proxy.url, {method: 'DELETE', path: '/admin/cache',
        headers: {authorization: `Bearer ${ADMIN_TOKEN}`}});
}

h.test('a repeated body takes its keys from the memo and is answered the same', async () => {
    const body = h.chatBody(h.uniq('memo repeat'));
    const first = await postCounted(body);
    h.assertFromUpstream(first.res, env.mock);
    assert.equal(first.memo, 0, 'a new body is parsed');
    for (let i = 0; i < 3; i++) {
        const again = await postCounted(body);
        h.assertHit(again.res);
        assert.equal(again.memo, 1, 'a repeated body comes from the memo');
        assert.deepEqual(again.res.json, first.res.json);
    }
});

h.test('every key input outside the body splits the memo as it splits the cache', async () => {
    const body = h.chatBody(h.uniq('memo inputs'));
    const base = {authorization: 'Bearer sk-memo-a'};
    h.assertFromUpstream((await postCounted(body, base)).res, env.mock);
    h.assertHit((await postCounted(body, base)).res);
    const others = [
        ['another credential', CHAT, {authorization: 'Bearer sk-memo-b'}],
        ['a second credential header', CHAT, {...base, 'x-api-key': 'key-2'}],
        ['a namespace', CHAT, {...base, 'x-cache-namespace': 'team-memo'}],
        ['a cache-key-headers value', CHAT, {...base, 'openai-organization': 'org-memo'}],
        ['a query', `${CHAT}?api-version=2024-10-01`, base],
    ];
    for (const [what, path, headers] of others) {
        const calls = env.mock.callCount(CHAT);
        const r = await postCounted(body, headers, path);
        assert.equal(r.res.headers['x-cache-status'], 'MISS', what);
        assert.equal(r.memo, 0, `${what}: not the memo's entry`);
        assert.equal(env.mock.callCount(CHAT), calls + 1, `${what}: asked upstream`);
        const again = await postCounted(body, headers, path);
        h.assertHit(again.res);
        assert.equal(again.memo, 1, `${what}: its own memo entry`);
    }
    /* One byte more in the body (white space, same JSON): same cache key, not the memo's entry. */
    const spaced = `${JSON.stringify(body)} `;
    const r = await postCounted(spaced, {...base, 'content-type': 'application/json'});
    h.assertHit(r.res);
    assert.equal(r.memo, 0, 'other bytes are parsed again');
});

h.test('a memo answer that misses the cache goes upstream with the body as sent', async () => {
    const body = h.chatBody(h.uniq('memo then miss'), {temperature: 0.25});
    const first = await postCounted(body);
    h.assertFromUpstream(first.res, env.mock);
    const sent = env.mock.lastRequest(CHAT).body;
    const flushed = await flushAll();
    assert.equal(flushed.status, 200, flushed.text);
    const calls = env.mock.callCount(CHAT);
    const r = await postCounted(body);
    assert.equal(r.memo, 1, 'keys from the memo');
    h.assertFromUpstream(r.res, env.mock);
    assert.equal(env.mock.callCount(CHAT), calls + 1);
    /* The same body upstream, hints included (they come from the body, parsed now). */
    assert.deepEqual(env.mock.lastRequest(CHAT).body, sent, 'the upstream got the same body');
    assert.equal(typeof sent.prompt_cache_key, 'string');
    /* Stored under the same key (before it was sent): the next one is a hit. Asked until it
     * hits, a miss would store it and hide that the refetched answer was not. */
    h.assertHit(await env.proxy.post(CHAT, body));
});

h.test('a streamed body keeps streaming when its keys come from the memo', async () => {
    const body = h.chatBody(h.uniq('memo stream'), {stream: true});
    const first = await postCounted(body);
    h.assertFromUpstream(first.res, env.mock);
    assert.match(String(first.res.headers['content-type']), /text\/event-stream/);
    /* the stream was stored before its end was sent */
    const hit = await postCounted(body);
    h.assertHit(hit.res);
    assert.equal(hit.memo, 1);
    assert.match(String(hit.res.headers['content-type']), /text\/event-stream/);
    assert.equal(hit.res.text, first.res.text, 'the same events');
    /* X-Cache-Mode: off with a memo answer: relayed from upstream, still a stream. */
    const off = await postCounted(body, {'x-cache-mode': 'off'});
    assert.equal(off.memo, 1);
    h.assertFromUpstream(off.res, env.mock, 'BYPASS');
    assert.match(String(off.res.headers['content-type']), /text\/event-stream/);
    assert.match(off.res.text, /data: \[DONE\]/);
});

h.test('bad request headers are still refused when the body comes from the memo', async () => {
    const body = h.chatBody(h.uniq('memo controls'));
    await postCounted(body);
    const res = await env.proxy.post(CHAT, body, {'x-cache-mode': 'sometimes'});
    h.assertOpenAIError(res, 400);
    assert.match(res.json.error.message, /X-Cache-Mode/);
});

/*
 * A body the API says never to cache (a Messages request naming a container)
 * is not memoised: a repeat answered by the memo would not be parsed and so
 * not judged again, and went to the cache (MISS, then stored and HIT).
 */
h.test('a body never to cache is not memoised: every repeat bypasses the cache', async () => {
    const body = {...h.messagesBody(h.uniq('memo container')), container: 'container_memo'};
    for (let i = 0; i < 3; i++) {
        const r = await postCounted(body, {}, '/v1/messages');
        assert.equal(r.res.cache, 'BYPASS', `repeat ${i}`);
        assert.equal(r.memo, 0, 'parsed and judged again');
    }
});
