'use strict';
/*
 * A client that hangs up: the proxy notices, stops the upstream call (the
 * mock sees its response abandoned), caches nothing, counts client_aborts
 * and keeps serving everyone else.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment();

const CHAT = '/v1/chat/completions';
const MESSAGES = '/v1/messages';

const holdId = () => h.uniq('hold').replace(' ', '-');

/* Open a held stream, read its first event, hang up; the mock must see the abort. */
async function hangUpMidStream(path, body) {
    const aborted = env.mock.aborted;
    const id = holdId();
    const s = await env.proxy.openStream(path, body, {'x-mock-hold': id});
    assert.equal(s.status, 200);
    await s.nextEvent(5000);
    await env.mock.waitForHold(id);
    s.destroy();
    try {
        await env.mock.waitForAborted(aborted + 1, 10000);
    } finally {
        env.mock.release(id);
    }
}

for (const [path, body] of [
    [CHAT, () => h.chatBody(h.uniq('hang up chat'), h.STREAM_WITH_USAGE)],
    [MESSAGES, () => h.messagesBody(h.uniq('hang up claude'), {stream: true})],
]) {
    h.test(`${path}: hang-up mid-stream aborts the upstream call and caches nothing`, async () => {
        const b = body();
        const before = await env.proxy.stats();
        await hangUpMidStream(path, b);

        assert.equal((await env.proxy.get('/healthz')).status, 200, 'the proxy keeps serving');
        const calls = env.mock.callCount(path);
        const again = await env.proxy.post(path, b);
        assert.equal(again.status, 200);
        h.assertFromUpstream(again, env.mock);
        assert.equal(env.mock.callCount(path), calls + 1, 'nothing was cached from the cut stream');
        h.assertHit(await env.proxy.post(path, b));

        await h.eventually(async () => {
            const after = await env.proxy.stats();
            assert.ok(after.client_aborts > before.client_aborts, 'client_aborts counted');
        });
    });
}

h.test('hang-up while waiting for a slow upstream answer aborts the upstream call', async () => {
    const body = h.chatBody(h.uniq('hang up early'));
    const calls = env.mock.callCount(CHAT);
    const aborted = env.mock.aborted;
    /* The mock would answer after 30 s (well within upstream-timeout's 60 s), and stops
     * waiting as soon as the proxy closes the call. */
    const {req, response} = env.proxy.begin(CHAT, body, {'x-mock-delay-ms': '30000'});
    response.catch(() => {}); /* we hang up: the request fails on our side by design */
    await env.mock.waitForCalls(calls + 1, CHAT);
    req.destroy();
    /* Before the mock's answer: the proxy saw the hang-up and closed the upstream call. */
    await env.mock.waitForAborted(aborted + 1, 20000);
    h.assertFromUpstream(await env.proxy.post(CHAT, body), env.mock);
});

h.test('other clients are unaffected by a hang-up', async () => {
    const id = holdId();
    const leaving = await env.proxy.openStream(CHAT, h.chatBody(h.uniq('leaving'), {stream: true}),
        {'x-mock-hold': id});
    await leaving.nextEvent(5000);
    const staying = h.chatBody(h.uniq('staying'));
    leaving.destroy();
    const r = await env.proxy.post(CHAT, staying);
    assert.equal(r.status, 200);
    env.mock.release(id);
    h.assertHit(await env.proxy.post(CHAT, staying));
});
