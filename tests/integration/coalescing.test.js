'use strict';
/*
 * Concurrent identical misses coalesce: one upstream call, the other
 * requests wait for it and get the same answer (streams are teed to the
 * waiters), errors included; one of them hanging up leaves the others their
 * answer. Requests of different tenants never coalesce.
 */
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const h = require('./lib');

const env = h.environment();

const CHAT = '/v1/chat/completions';
const N = 10;

const sha = (s) => crypto.createHash('sha256').update(s).digest('hex');

const holdId = () => h.uniq('hold').replace(' ', '-');

/*
 * Run send(headers) N times at once, the upstream call held (x-mock-hold) until
 * the other N-1 have joined it (counted in /stats as they join): a delay
 * instead would be outlasted by a slow machine, and late requests would hit
 * the stored answer rather than join. One upstream call for all of them.
 */
async function concurrently(send) {
    const before = (await env.proxy.stats()).coalesced;
    const calls = env.mock.callCount(CHAT);
    const id = holdId();
    const pending = Array.from({length: N}, () => send({'x-mock-hold': id}));
    await env.mock.waitForHold(id);
    await h.waitFor(async () => (await env.proxy.stats()).coalesced - before >= N - 1,
        {what: `${N - 1} requests joining the call in flight`});
    env.mock.release(id);
    const results = await Promise.all(pending);
    assert.equal(env.mock.callCount(CHAT), calls + 1, 'one upstream call for all of them');
    assert.equal((await env.proxy.stats()).coalesced - before, N - 1, 'stats.coalesced');
    return results;
}

/* Send each of sends (functions of extra headers) with a hold of its own; resolves once every
 * upstream call is held at once (so none joined another), then releases them. */
async function allInFlight(sends) {
    const ids = sends.map(() => holdId());
    const pending = sends.map((send, i) => send({'x-mock-hold': ids[i]}));
    for (const id of ids)
        await env.mock.waitForHold(id);
    ids.forEach((id) => env.mock.release(id));
    return Promise.all(pending);
}

h.test('10 concurrent identical requests make one upstream call', async () => {
    const body = h.chatBody(h.uniq('coalesce json'));
    const results = await concurrently((hold) => env.proxy.post(CHAT, body, hold));
    for (const r of results)
        assert.equal(r.status, 200, r.text);
    const texts = new Set(results.map((r) => r.text));
    assert.equal(texts.size, 1, 'all ten answers are equal');
    h.assertHit(await env.proxy.post(CHAT, body));
});

h.test('10 concurrent identical streams make one upstream call, teed to all', async () => {
    const body = h.chatBody(h.uniq('coalesce stream'), h.STREAM_WITH_USAGE);
    const headers = {'x-mock-chunk-delay-ms': '30', 'x-mock-chunks': '10'};
    const results = await concurrently((hold) => env.proxy.post(CHAT, body, {...headers, ...hold}));
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
    const id = holdId();
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
    const [a, b] = await allInFlight([
        (hold) => env.proxy.post(CHAT, body, {...h.bearer('sk-coalesce-a'), ...hold}),
        (hold) => env.proxy.post(CHAT, body, {...h.bearer('sk-coalesce-b'), ...hold}),
    ]);
    assert.equal(env.mock.callCount(CHAT), calls + 2);
    assert.notEqual(sha(h.chatText(a.json)), sha(h.chatText(b.json)), 'each tenant got its own answer');
});

h.test('different concurrent requests do not coalesce', async () => {
    const calls = env.mock.callCount(CHAT);
    const results = await allInFlight([1, 2, 3].map((i) =>
        (hold) => env.proxy.post(CHAT, h.chatBody(h.uniq(`distinct ${i}`)), hold)));
    assert.equal(env.mock.callCount(CHAT), calls + 3);
    results.forEach((r, i) => assert.match(h.chatText(r.json), new RegExp(`distinct ${i + 1}`)));
});

h.test('streams that differ in include_usage do not share a call: each gets what it asked for', async () => {
    const q = h.uniq('usage split');
    const withUsage = h.chatBody(q, h.STREAM_WITH_USAGE);
    const without = h.chatBody(q, {stream: true});
    const calls = env.mock.callCount(CHAT);
    const [a, b] = await allInFlight([(hold) => env.proxy.post(CHAT, withUsage, hold),
        (hold) => env.proxy.post(CHAT, without, hold)]);
    assert.equal(env.mock.callCount(CHAT), calls + 2, 'two upstream calls');
    assert.ok(h.assembleChat(h.parseSSE(a.text)).usage, 'the include_usage stream has usage');
    assert.ok(!h.assembleChat(h.parseSSE(b.text)).usage, 'the other has none');
});

h.test('the first client hangs up mid-stream: the clients that joined its call get the whole answer', async () => {
    const body = h.chatBody(h.uniq('leader leaves'), h.STREAM_WITH_USAGE);
    const id = holdId();
    const calls = env.mock.callCount(CHAT);
    const before = (await env.proxy.stats()).coalesced;
    const aborted = env.mock.aborted;
    const leader = await env.proxy.openStream(CHAT, body, {'x-mock-hold': id, 'x-mock-chunks': '8'});
    await leader.nextEvent(5000);
    await env.mock.waitForHold(id);
    const followers = [0, 1, 2].map(() => env.proxy.post(CHAT, body));
    await h.waitFor(async () => (await env.proxy.stats()).coalesced - before >= 3,
        {what: 'three requests joining the call in flight'});
    leader.destroy();
    env.mock.release(id);
    const answers = (await Promise.all(followers)).map((r) => {
        assert.equal(r.status, 200, r.text);
        return h.assembleChat(h.parseSSE(r.text));
    });
    for (const a of answers) {
        assert.ok(a.done, 'every follower\'s stream ends with [DONE]');
        assert.equal(a.content, answers[0].content);
    }
    assert.match(answers[0].content, /^mock answer #\d+ to: leader leaves/);
    assert.equal(env.mock.callCount(CHAT), calls + 1, 'one upstream call');
    assert.equal(env.mock.aborted, aborted, 'the call was not aborted for the one who left');
    h.assertHit(await env.proxy.post(CHAT, body));
});

h.test('an upstream 429 reaches every client waiting on the call, and is not stored', async () => {
    const body = h.chatBody(h.uniq('shared 429'));
    const results = await concurrently((hold) => env.proxy.post(CHAT, body, {'x-mock-status': '429', ...hold}));
    for (const r of results) {
        h.assertOpenAIError(r, 429);
        assert.match(r.text, /mock error 429/);
    }
    h.assertFromUpstream(await env.proxy.post(CHAT, body), env.mock);
});

h.test('requests with Cache-Control: no-store or no-cache make a call of their own', async () => {
    const body = h.chatBody(h.uniq('own call'));
    const calls = env.mock.callCount(CHAT);
    const results = await allInFlight([(hold) => env.proxy.post(CHAT, body, hold),
        (hold) => env.proxy.post(CHAT, body, {'cache-control': 'no-store', ...hold}),
        (hold) => env.proxy.post(CHAT, body, {'cache-control': 'no-cache', ...hold})]);
    assert.equal(env.mock.callCount(CHAT), calls + 3, 'three upstream calls');
    assert.equal(new Set(results.map((r) => h.chatText(r.json))).size, 3, 'three answers');
});
