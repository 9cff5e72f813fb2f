'use strict';
/*
 * Concurrent identical misses coalesce: one upstream call, the other
 * requests wait for it and get the same answer (streams are teed to the
 * waiters). Requests of different tenants never coalesce.
 */
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const h = require('./lib');

const env = h.environment();

const CHAT = '/v1/chat/completions';
const N = 10;

const sha = (s) => crypto.createHash('sha256').update(s).digest('hex');

/* Run fn N times at once; check one upstream call and N-1 coalesced in /stats. */
async function concurrently(fn) {
    const before = await env.proxy.stats();
    const calls = env.mock.callCount(CHAT);
    const results = await Promise.all(Array.from({length: N}, () => fn()));
    assert.equal(env.mock.callCount(CHAT), calls + 1, 'one upstream call for all of them');
    await h.eventually(async () => {
        const after = await env.proxy.stats();
        assert.equal(after.coalesced - before.coalesced, N - 1, 'stats.coalesced');
    });
    return results;
}

h.test('10 concurrent identical requests make one upstream call', async () => {
    const body = h.chatBody(h.uniq('coalesce json'));
    /* The delay keeps the first call in flight until all ten have arrived, even under ASan. */
    const results = await concurrently(() => env.proxy.post(CHAT, body, {'x-mock-delay-ms': '1000'}));
    for (const r of results)
        assert.equal(r.status, 200, r.text);
    const texts = new Set(results.map((r) => r.text));
    assert.equal(texts.size, 1, 'all ten answers are equal');
    h.assertHit(await env.proxy.post(CHAT, body));
});

h.test('10 concurrent identical streams make one upstream call, teed to all', async () => {
    const body = h.chatBody(h.uniq('coalesce stream'), h.STREAM_WITH_USAGE);
    const headers = {'x-mock-delay-ms': '800', 'x-mock-chunk-delay-ms': '30', 'x-mock-chunks': '10'};
    const results = await concurrently(() => env.proxy.post(CHAT, body, headers));
    const answers = results.map((r) => {
        assert.equal(r.status, 200, r.text);
        const a = h.assembleChat(h.parseSSE(r.text));
        assert.ok(a.done, 'every stream ends with [DONE]');
        return a;
    });
    for (const a of answers.slice(1))
        assert.deepEqual({content: a.content, usage: a.usage}, {content: answers[0].content, usage: answers[0].usage});
    assert.match(answers[0].content, /^mock answer #\d+ to: coalesce stream/);
});

h.test('a stream that joins late gets the whole answer from the start', async () => {
    const body = h.chatBody(h.uniq('late joiner'), h.STREAM_WITH_USAGE);
    const id = h.uniq('hold').replace(' ', '-');
    const calls = env.mock.callCount(CHAT);
    const first = await env.proxy.openStream(CHAT, body, {'x-mock-hold': id});
    await first.nextEvent(5000);
    await env.mock.waitForHold(id);

    const coalesced = (await env.proxy.stats()).coalesced;
    const late = env.proxy.post(CHAT, body);
    await h.waitFor(async () => (await env.proxy.stats()).coalesced > coalesced,
        {what: 'the late request to join the call in flight'});
    env.mock.release(id);
    const [a, b] = await Promise.all([first.rest(), late]);
    assert.equal(env.mock.callCount(CHAT), calls + 1, 'the late request joined the call in flight');
    const fromFirst = h.assembleChat(a.events);
    const fromLate = h.assembleChat(h.parseSSE(b.text));
    assert.ok(fromFirst.done && fromLate.done);
    assert.equal(fromLate.content, fromFirst.content);
    assert.deepEqual(fromLate.usage, fromFirst.usage);
});

h.test('identical requests of different tenants do not coalesce', async () => {
    const body = h.chatBody(h.uniq('coalesce tenants'));
    const calls = env.mock.callCount(CHAT);
    const [a, b] = await Promise.all([
        env.proxy.post(CHAT, body, {...h.bearer('sk-coalesce-a'), 'x-mock-delay-ms': '300'}),
        env.proxy.post(CHAT, body, {...h.bearer('sk-coalesce-b'), 'x-mock-delay-ms': '300'}),
    ]);
    assert.equal(env.mock.callCount(CHAT), calls + 2);
    assert.notEqual(sha(h.chatText(a.json)), sha(h.chatText(b.json)), 'each tenant got its own answer');
});

h.test('different concurrent requests do not coalesce', async () => {
    const calls = env.mock.callCount(CHAT);
    const results = await Promise.all([1, 2, 3].map((i) =>
        env.proxy.post(CHAT, h.chatBody(h.uniq(`distinct ${i}`)), {'x-mock-delay-ms': '300'})));
    assert.equal(env.mock.callCount(CHAT), calls + 3);
    results.forEach((r, i) => assert.match(h.chatText(r.json), new RegExp(`distinct ${i + 1}`)));
});

h.test('streams that differ in include_usage do not share a call: each gets what it asked for', async () => {
    const q = h.uniq('usage split');
    const withUsage = h.chatBody(q, h.STREAM_WITH_USAGE);
    const without = h.chatBody(q, {stream: true});
    const calls = env.mock.callCount(CHAT);
    const headers = {'x-mock-delay-ms': '600'};
    const [a, b] = await Promise.all([env.proxy.post(CHAT, withUsage, headers),
        env.proxy.post(CHAT, without, headers)]);
    assert.equal(env.mock.callCount(CHAT), calls + 2, 'two upstream calls');
    assert.ok(h.assembleChat(h.parseSSE(a.text)).usage, 'the include_usage stream has usage');
    assert.ok(!h.assembleChat(h.parseSSE(b.text)).usage, 'the other has none');
});
