'use strict';
/*
 * Concurrent identical misses coalesce: one upstream call, the other
 * requests wait for it and get the same answer (streams are teed to the
 * waiters), errors included; one of them hanging up leaves the others their
 * answer. Requests of different tenants never coalesce. A client error that
 * answers a member the key leaves out (service_tier, metadata, user, ...)
 * reaches only requests byte-identical to the refused one: the others that
 * joined its call make their own.
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

/* ---- a refusal answers only the request that earned it ------------------------------------ */

const MSGS = '/v1/messages';
const TOO_MANY = Object.fromEntries(Array.from({length: 17}, (_, i) => [`k${i}`, 'v']));

/*
 * Send leader held before its head (x-mock-hold-head) until each of others
 * (bodies, sent with headers) has joined its call, then release it; resolves
 * to [leader's answer, ...others' answers]. Joining is counted in /stats.
 */
async function behindLeader(reqPath, leader, others, {leaderHeaders = {}, headers = {}} = {}) {
    const before = (await env.proxy.stats()).coalesced;
    const id = holdId();
    const lead = env.proxy.post(reqPath, leader, {...leaderHeaders, 'x-mock-hold-head': id});
    await env.mock.waitForHold(id);
    const rest = others.map((b) => env.proxy.post(reqPath, b, headers));
    await h.waitFor(async () => (await env.proxy.stats()).coalesced - before >= others.length,
        {what: `${others.length} requests joining the held call`});
    env.mock.release(id);
    return Promise.all([lead, ...rest]);
}

/*
 * An answer fetched for this request: a 200 MISS answering question. textOf(r) reads its
 * text; returns the upstream call's number.
 */
function ownMiss(r, question, textOf) {
    assert.equal(r.status, 200, r.text.slice(0, 300));
    assert.equal(r.headers['x-cache-status'], 'MISS');
    assert.equal(r.headers['x-upstream'], `127.0.0.1:${env.mock.port}`);
    const text = textOf(r);
    assert.ok(text.startsWith('mock answer #') && text.includes(question), text);
    return h.answerSeq(text);
}

h.test('a call refused for a member left out of the key answers only its own request: ' +
    'the others that joined it make their own calls and store them', async () => {
    const q = h.uniq('refused tier');
    const stats0 = await env.proxy.stats();
    const calls = env.mock.callCount(CHAT);
    const others = [h.chatBody(q), h.chatBody(q, {user: 'alice'}),
        h.chatBody(q, {service_tier: 'flex', metadata: {team: 'a'}})];
    const [lead, ...rest] = await behindLeader(CHAT, h.chatBody(q, {service_tier: 'bogus'}), others);
    h.assertOpenAIError(lead, 400);
    assert.equal(lead.json.error.param, 'service_tier');
    const seqs = rest.map((r) => ownMiss(r, q, (x) => h.chatText(x.json)));
    assert.equal(new Set(seqs).size, 3, 'three answers of three calls');
    assert.equal(env.mock.callCount(CHAT), calls + 4, 'the refused call and one for each other');
    const stats1 = await env.proxy.stats();
    assert.equal(stats1.coalesced - stats0.coalesced, 3, 'stats.coalesced counts the joins');
    assert.equal(stats1.coalesce_retries - stats0.coalesce_retries, 3, 'stats.coalesce_retries');
    const line = await env.proxy.waitAccessLog((l) => l.id === rest[0].headers['x-promptcache-request-id']);
    assert.equal(line.status, 200);
    assert.equal(line.cache, 'MISS');
    assert.equal(line.upstream, `127.0.0.1:${env.mock.port}`);
    const again = await env.proxy.post(CHAT, h.chatBody(q, {user: 'carol'}));
    h.assertHit(again);
    assert.ok(seqs.includes(h.answerSeq(h.chatText(again.json))), 'a follower\'s answer was stored');
});

h.test('streams: a refused call answers only its own stream, the others get their own whole stream',
    async () => {
        const q = h.uniq('refused metadata');
        const calls = env.mock.callCount(CHAT);
        const body = (extra) => h.chatBody(q, {...h.STREAM_WITH_USAGE, ...extra});
        const [lead, ...rest] = await behindLeader(CHAT, body({metadata: TOO_MANY}),
            [body({}), body({user: 'bob'})]);
        h.assertOpenAIError(lead, 400);
        assert.equal(lead.json.error.param, 'metadata');
        for (const r of rest) {
            ownMiss(r, q, (x) => h.assembleChat(h.parseSSE(x.text)).content);
            const a = h.assembleChat(h.parseSSE(r.text));
            assert.ok(a.done, 'the stream ends with [DONE]');
            assert.ok(a.usage, 'with the usage it asked for');
        }
        assert.equal(env.mock.callCount(CHAT), calls + 3);
    });

h.test('Anthropic Messages, JSON and stream: a refused call answers only its own request', async () => {
    for (const stream of [false, true]) {
        const q = h.uniq(`refused messages ${stream}`);
        const calls = env.mock.callCount(MSGS);
        const body = (extra) => h.messagesBody(q, {...(stream ? {stream: true} : {}), ...extra});
        const [lead, other] = await behindLeader(MSGS, body({service_tier: 'bogus'}),
            [body({metadata: {user_id: 'u-1'}})], {headers: h.apiKey('sk-ant-coalesce'),
                leaderHeaders: h.apiKey('sk-ant-coalesce')});
        h.assertAnthropicError(lead, 400);
        assert.match(lead.json.error.message, /^service_tier: /);
        ownMiss(other, q, (x) => (stream ? h.messageText(h.assembleMessage(h.parseSSE(x.text)).message)
            : h.messageText(x.json)));
        if (stream)
            assert.ok(h.assembleMessage(h.parseSSE(other.text)).done, 'the stream ends with message_stop');
        assert.equal(env.mock.callCount(MSGS), calls + 2);
    }
});

h.test('identical refused requests still share one call and its error', async () => {
    const body = h.chatBody(h.uniq('identical refusal'), {service_tier: 'bogus'});
    const results = await concurrently((hold) => env.proxy.post(CHAT, body, hold));
    for (const r of results) {
        h.assertOpenAIError(r, 400);
        assert.equal(r.json.error.param, 'service_tier');
    }
    const q = h.uniq('identical refusal stream');
    const msg = h.messagesBody(q, {stream: true, metadata: {team: 'x'}});
    const before = env.mock.callCount(MSGS);
    const [lead, other] = await behindLeader(MSGS, msg, [msg]);
    for (const r of [lead, other])
        h.assertAnthropicError(r, 400);
    assert.equal(env.mock.callCount(MSGS), before + 1, 'one upstream call');
});

h.test('a 429 is shared with every request that joined the call, identical or not', async () => {
    const q = h.uniq('shared rate limit');
    const calls = env.mock.callCount(CHAT);
    const [lead, other] = await behindLeader(CHAT, h.chatBody(q, {user: 'a'}), [h.chatBody(q, {user: 'b'})],
        {leaderHeaders: {'x-mock-status': '429'}});
    h.assertOpenAIError(lead, 429);
    h.assertOpenAIError(other, 429);
    assert.equal(env.mock.callCount(CHAT), calls + 1, 'one upstream call');
});

h.test('requests that leave a refused call together share their own', async () => {
    const q = h.uniq('leave together');
    const stats0 = await env.proxy.stats();
    const calls = env.mock.callCount(CHAT);
    const idA = holdId();
    const idB = holdId();
    const lead = env.proxy.post(CHAT, h.chatBody(q, {store: 'yes'}), {'x-mock-hold-head': idA});
    await env.mock.waitForHold(idA);
    const same = h.chatBody(q, {user: 'same'});
    const rest = [0, 1].map(() => env.proxy.post(CHAT, same, {'x-mock-hold': idB}));
    await h.waitFor(async () => (await env.proxy.stats()).coalesced - stats0.coalesced >= 2,
        {what: 'two requests joining the held call'});
    env.mock.release(idA);
    await env.mock.waitForHold(idB);
    await h.waitFor(async () => (await env.proxy.stats()).coalesced - stats0.coalesced >= 3,
        {what: 'the second leaving request joining the first one\'s call'});
    env.mock.release(idB);
    const [a, b, c] = await Promise.all([lead, ...rest]);
    h.assertOpenAIError(a, 400);
    assert.equal(a.json.error.param, 'store');
    const text = (x) => h.chatText(x.json);
    assert.equal(ownMiss(b, q, text), ownMiss(c, q, text), 'one answer for both');
    assert.equal(env.mock.callCount(CHAT), calls + 2, 'the refused call and one shared call');
    assert.equal((await env.proxy.stats()).coalesce_retries - stats0.coalesce_retries, 2);
});

h.test('a request that left a refused call and hangs up aborts its own call only', async () => {
    const q = h.uniq('leave then hang up');
    const idA = holdId();
    const idB = holdId();
    const before = (await env.proxy.stats()).coalesced;
    const aborted = env.mock.aborted;
    const lead = env.proxy.post(CHAT, h.chatBody(q, {user: 42, stream: true}), {'x-mock-hold-head': idA});
    await env.mock.waitForHold(idA);
    /* its head comes once it has left the refused call for its own */
    const opening = env.proxy.openStream(CHAT, h.chatBody(q, {stream: true}), {'x-mock-hold': idB});
    await h.waitFor(async () => (await env.proxy.stats()).coalesced - before >= 1,
        {what: 'the request joining the held call'});
    env.mock.release(idA);
    h.assertOpenAIError(await lead, 400);
    await env.mock.waitForHold(idB);
    const other = await opening;
    assert.equal(other.status, 200);
    const first = await other.nextEvent(5000);
    assert.equal(JSON.parse(first.data).choices[0].delta.role, 'assistant', 'its own stream began');
    other.destroy();
    await env.mock.waitForAborted(aborted + 1);
    assert.equal(env.mock.lastRequest(CHAT).aborted, true, 'its own call was the one aborted');
});
