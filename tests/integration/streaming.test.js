'use strict';
/*
 * Streams are relayed as they arrive (never buffered first), big answers
 * arrive intact, and a slow client slows the upstream down (backpressure)
 * instead of making the proxy buffer the whole answer.
 */
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const h = require('./lib');

const env = h.environment();

const CHAT = '/v1/chat/completions';
const MESSAGES = '/v1/messages';
/*
 * The big stream of the backpressure test: more than the kernel can hold for a paused client
 * on the two loopback connections (mock -> proxy, proxy -> client; each a receive and a send
 * buffer, which the kernel grows up to tcp_rmem's and tcp_wmem's largest), and the proxy's own
 * queues (the flight's 1 MiB, the client's output) beside them. A fixed 30 MB was within
 * reach where tcp_rmem allows 32 MiB: the mock then wrote the whole stream into the buffers
 * and the test took that for the proxy buffering it (1 run in 2 under load).
 */
function kernelMax(name, fallback) {
    try {
        return Number(fs.readFileSync(`/proc/sys/net/ipv4/${name}`, 'utf8').trim().split(/\s+/)[2]) || fallback;
    } catch (e) {
        return fallback;
    }
}
const BIG = Math.max(30000000,
    2 * (kernelMax('tcp_rmem', 6 << 20) + kernelMax('tcp_wmem', 4 << 20)) + (8 << 20));

const sha = (s) => crypto.createHash('sha256').update(s).digest('hex');
const holdId = () => h.uniq('hold').replace(' ', '-');

/* The client gets the first event while the mock still holds back the rest. */
async function firstEventWhileHeld(path, body) {
    const id = holdId();
    const s = await env.proxy.openStream(path, body, {'x-mock-hold': id});
    try {
        assert.equal(s.status, 200);
        assert.match(String(s.headers['content-type']), /^text\/event-stream/);
        assert.equal(s.headers['x-cache-status'], 'MISS');
        const first = await s.nextEvent(5000);
        assert.ok(env.mock.isHolding(id), 'the mock is still holding the rest of the stream');
        assert.ok(!s.ended, 'the stream is still open');
        return {s, first, id};
    } catch (e) {
        env.mock.release(id);
        s.destroy();
        throw e;
    }
}

h.test('chat streams are incremental: the first event arrives before the rest exists', async () => {
    const {s, first, id} = await firstEventWhileHeld(CHAT, h.chatBody(h.uniq('incremental'), h.STREAM_WITH_USAGE));
    const chunk = JSON.parse(first.data);
    assert.equal(chunk.object, 'chat.completion.chunk');
    assert.equal(chunk.choices[0].delta.role, 'assistant');
    env.mock.release(id);
    const end = await s.rest();
    const a = h.assembleChat(end.events);
    assert.ok(end.complete && a.done);
    assert.match(a.content, /^mock answer #\d+ to: incremental/);
});

h.test('message streams are incremental: message_start arrives before the rest exists', async () => {
    const {s, first, id} = await firstEventWhileHeld(MESSAGES,
        h.messagesBody(h.uniq('incremental claude'), {stream: true}));
    assert.equal(first.event, 'message_start');
    env.mock.release(id);
    const end = await s.rest();
    assert.ok(h.assembleMessage(end.events).done);
});

h.test('a 1 MB JSON answer arrives intact', async () => {
    const r = await env.proxy.post(CHAT, h.chatBody(h.uniq('big json')), {'x-mock-size': '1000000'});
    assert.equal(r.status, 200);
    const text = h.chatText(r.json);
    assert.equal(text.length, 1000000);
    assert.equal(sha(text), env.mock.lastRequest(CHAT).answer.sha256);
});

h.test('backpressure: a paused client stalls the upstream; on resume every byte arrives', {timeout: 120000}, async (t) => {
    const before = {...env.mock.backpressure};
    const body = h.chatBody(h.uniq('big stream'), {stream: true});
    const s = await env.proxy.openStream(CHAT, body, {'x-mock-size': String(BIG)});
    s.pause();
    await h.waitFor(() => env.mock.backpressure.waits > before.waits,
        {timeout: 20000, what: 'the mock to see write backpressure'});
    /* Wait for the writes to stop moving: everything in between is buffered somewhere. */
    let last = -1;
    await h.waitFor(() => {
        const now = env.mock.backpressure.bytesWritten;
        const still = now === last;
        last = now;
        return still;
    }, {timeout: 20000, interval: 1000, what: 'the mock\'s writes to stall while the client is paused'});
    const written = env.mock.backpressure.bytesWritten - before.bytesWritten;
    assert.ok(written < BIG, `the mock stalled after ${written} bytes, short of the whole ${BIG} ` +
        `(the paused client had read ${s.bytes}; backpressure waits ${env.mock.backpressure.waits - before.waits})`);
    t.diagnostic(`paused client: the mock stalled after ${written} of ${BIG} bytes, client read ${s.bytes}`);

    s.resume();
    const end = await s.rest(90000);
    assert.ok(end.complete, 'the stream ended normally');
    const a = h.assembleChat(end.events);
    assert.ok(a.done, 'the stream ends with [DONE]');
    assert.equal(a.content.length, BIG);
    assert.equal(sha(a.content), env.mock.lastRequest(CHAT).answer.sha256, 'every byte intact');
});

h.test('the proxy still serves after the big stream', async () => {
    const body = h.chatBody(h.uniq('after big'));
    assert.equal((await env.proxy.post(CHAT, body)).status, 200);
    h.assertHit(await env.proxy.post(CHAT, body));
});

/*
 * An answer over cache-max-entry-size is relayed whole and not stored, and what it cost is
 * still counted: its usage (at the end of the JSON, after the part the proxy let go) was
 * lost with the rest, so /stats counted no tokens for it.
 */
h.test('a JSON answer over cache-max-entry-size is relayed, not stored, and its tokens are counted', async () => {
    const proxy = await env.startProxy({args: ['--cache-max-entry-size', '64k']});
    try {
        for (const [path, makeBody] of [[CHAT, h.chatBody], [MESSAGES, h.messagesBody]]) {
            const before = await proxy.stats();
            const body = makeBody(h.uniq(`over the entry size ${path}`));
            const usage = {'x-mock-size': '300000', 'x-mock-prompt-tokens': '1234',
                'x-mock-completion-tokens': '77'};
            const r = await proxy.post(path, body, usage);
            assert.equal(r.status, 200, r.text);
            const text = path === CHAT ? h.chatText(r.json) : r.json.content[0].text;
            assert.equal(sha(text), env.mock.lastRequest(path).answer.sha256, 'relayed whole');
            const after = await proxy.stats();
            assert.equal(after.tokens_upstream_prompt - before.tokens_upstream_prompt, 1234, path);
            assert.equal(after.tokens_upstream_completion - before.tokens_upstream_completion, 77, path);
            assert.equal(after.cache_stores, before.cache_stores, 'not stored');
            h.assertFromUpstream(await proxy.post(path, body, usage), env.mock);
        }
    } finally {
        await proxy.stop();
    }
});

/*
 * A stream over cache-max-entry-size is relayed, not stored, and its usage is still counted: the
 * proxy let go of the recording once it passed the size, and the usage (in the last events) was
 * read from the recording only, so /stats and the report counted no tokens and no money for the
 * largest (dearest) streams.
 */
h.test('a stream over cache-max-entry-size is relayed, not stored, and its tokens are counted', async () => {
    const proxy = await env.startProxy({args: ['--cache-max-entry-size', '64k']});
    const RESPONSES = '/v1/responses';
    try {
        const cases = [
            [CHAT, h.chatBody, h.STREAM_WITH_USAGE, 0],
            [CHAT, h.chatBody, {stream: true}, 0], /* the proxy asks for the usage itself */
            [MESSAGES, h.messagesBody, {stream: true}, 40],
            [RESPONSES, (text, extra) => ({model: 'gpt-4o-mini', input: text, ...extra}), {stream: true}, 0],
        ];
        for (const [path, makeBody, extra, write] of cases) {
            const before = await proxy.stats();
            const body = makeBody(h.uniq(`stream over the entry size ${path}`), extra);
            const headers = {'x-mock-size': '300000', 'x-mock-prompt-tokens': '1234',
                'x-mock-completion-tokens': '77', 'x-mock-cache-read': '100',
                'x-mock-cache-write': String(write)};
            const s = await proxy.openStream(path, body, headers);
            assert.equal(s.status, 200);
            const end = await s.rest(30000);
            assert.ok(end.complete, `${path}: the stream ended normally`);
            const after = await proxy.stats();
            const what = `${path} ${JSON.stringify(extra)}`;
            assert.equal(after.tokens_upstream_prompt - before.tokens_upstream_prompt, 1234 + 100 + write, what);
            assert.equal(after.tokens_upstream_cached - before.tokens_upstream_cached, 100, what);
            assert.equal(after.tokens_upstream_completion - before.tokens_upstream_completion, 77, what);
            assert.equal(after.tokens_upstream_cache_write - before.tokens_upstream_cache_write, write, what);
            assert.equal(after.cache_stores, before.cache_stores, 'not stored');
        }
    } finally {
        await proxy.stop();
    }
});
