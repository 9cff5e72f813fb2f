'use strict';
/*
 * Upstream failures: error answers are relayed and never cached; an upstream
 * that is down gives 502 and one slower than upstream-timeout gives 504, in
 * the shape of the API that was called; a stream the upstream cuts off (or
 * stalls) is not cached.
 */
const assert = require('node:assert/strict');
const net = require('node:net');
const h = require('./lib');

const UPSTREAM_TIMEOUT = 0.5;
/* What the slow upstream takes: far beyond the timeout, so that only the proxy's timeout can end
 * such a call (the mock stops waiting as soon as the proxy closes the call). */
const SLOW_MS = '30000';
const env = h.environment({proxyArgs: ['--upstream-timeout', String(UPSTREAM_TIMEOUT)]});

const CHAT = '/v1/chat/completions';
const MESSAGES = '/v1/messages';

for (const [path, makeBody] of [[CHAT, h.chatBody], [MESSAGES, h.messagesBody]]) {
    h.test(`${path}: an upstream 500 is relayed as is and not cached`, async () => {
        const body = makeBody(h.uniq('upstream 500'));
        const calls = env.mock.callCount(path);
        for (let i = 1; i <= 2; i++) {
            const r = await env.proxy.post(path, body, {'x-mock-status': '500'});
            h.assertApiError(r, path, 500);
            assert.match(r.text, /mock error 500/, 'the upstream\'s own error body');
            assert.notEqual(r.headers['x-cache-status'], 'HIT');
            assert.equal(env.mock.callCount(path), calls + i, 'every attempt reaches the upstream');
        }
        const ok = await env.proxy.post(path, body);
        assert.equal(ok.status, 200);
        h.assertFromUpstream(ok, env.mock);
        h.assertHit(await env.proxy.post(path, body));
    });
}

h.test('a 429 from the upstream is relayed with its status and not cached', async () => {
    const body = h.chatBody(h.uniq('upstream 429'));
    h.assertOpenAIError(await env.proxy.post(CHAT, body, {'x-mock-status': '429'}), 429);
    h.assertFromUpstream(await env.proxy.post(CHAT, body), env.mock);
});

h.test('an upstream 500 on a stream request is relayed as a JSON error', async () => {
    const body = h.chatBody(h.uniq('stream 500'), h.STREAM_WITH_USAGE);
    h.assertOpenAIError(await env.proxy.post(CHAT, body, {'x-mock-status': '500'}), 500);
    const s = await env.proxy.post(CHAT, body);
    h.assertFromUpstream(s, env.mock);
});

h.test('stats count upstream 5xx answers', async () => {
    const before = await env.proxy.stats();
    await env.proxy.post(CHAT, h.chatBody(h.uniq('count 5xx')), {'x-mock-status': '503'});
    await h.eventually(async () => {
        const after = await env.proxy.stats();
        assert.equal(after.upstream_5xx - before.upstream_5xx, 1);
        assert.equal(after.cache_stores, before.cache_stores);
    });
});

h.test('an upstream slower than upstream-timeout gives 504 in the API\'s shape', async () => {
    const before = await env.proxy.stats();
    for (const [path, makeBody] of [[CHAT, h.chatBody], [MESSAGES, h.messagesBody]]) {
        /* a 504, so the proxy's timeout answered: the upstream would have sent a 200 */
        const r = await env.proxy.post(path, makeBody(h.uniq('slow upstream')), {'x-mock-delay-ms': SLOW_MS});
        h.assertApiError(r, path, 504);
    }
    await h.eventually(async () => {
        const after = await env.proxy.stats();
        assert.ok(after.upstream_timeouts - before.upstream_timeouts >= 2, 'upstream_timeouts counted');
    });
});

h.test('after a timeout the late answer is not cached', async () => {
    const body = h.chatBody(h.uniq('late answer'));
    const aborted = env.mock.aborted;
    h.assertOpenAIError(await env.proxy.post(CHAT, body, {'x-mock-delay-ms': SLOW_MS}), 504);
    /* The proxy closed the call: no late answer can come and be stored any more. */
    await env.mock.waitForAborted(aborted + 1);
    h.assertFromUpstream(await env.proxy.post(CHAT, body), env.mock);
});

h.test('a stream that stalls longer than upstream-timeout ends unfinished and is not cached', async () => {
    const body = h.chatBody(h.uniq('stalled stream'), h.STREAM_WITH_USAGE);
    const s = await env.proxy.openStream(CHAT, body, {'x-mock-chunk-delay-ms': SLOW_MS});
    assert.equal(s.status, 200);
    const end = await s.rest(10000);
    assert.ok(!h.assembleChat(end.events).done, 'no [DONE]: the client can tell the stream was cut');
    h.assertFromUpstream(await env.proxy.post(CHAT, body), env.mock);
});

h.test('a JSON answer the upstream cuts off is not cached', async () => {
    const body = h.chatBody(h.uniq('cut json'));
    const r = await env.proxy.post(CHAT, body, {'x-mock-cut': '1'}).catch((e) => e);
    /* Either a 502 before anything was relayed, or a response cut off in turn. */
    if (!(r instanceof Error))
        assert.equal(r.status, 502, `a cut-off upstream answer is not a success: ${r.status} ${r.text.slice(0, 200)}`);
    h.assertFromUpstream(await env.proxy.post(CHAT, body), env.mock);
});

h.test('a stream the upstream cuts off is not cached', async () => {
    const body = h.chatBody(h.uniq('cut stream'), h.STREAM_WITH_USAGE);
    const s = await env.proxy.openStream(CHAT, body, {'x-mock-cut': '1', 'x-mock-chunks': '8'});
    const end = await s.rest(10000);
    assert.ok(!h.assembleChat(end.events).done, 'the cut stream has no [DONE]');
    h.assertFromUpstream(await env.proxy.post(CHAT, body), env.mock);
    const stats = await env.proxy.stats();
    assert.ok(stats.upstream_errors >= 1, 'upstream_errors counted');
});

/*
 * The mock writes a Responses stream's last piece and destroys the socket at
 * once, so the proxy often relays those bytes and learns of the cut in one
 * loop turn: the connection must still close (it stayed open, and the client
 * hung, when the queued chunk was written by the deferred flush).
 */
h.test('a stream cut off right after its last bytes closes the client connection', async () => {
    for (let i = 0; i < 10; i++) {
        const body = {model: h.CHAT_MODEL, input: h.uniq('cut at once'), stream: true};
        const {response} = env.proxy.begin('/v1/responses', body,
            {'x-mock-cut': '1', 'x-mock-chunk-delay-ms': '20'});
        const res = await response;
        res.resume();
        const closed = await Promise.race([
            new Promise((resolve) => require('node:stream').finished(res, () => resolve(true))),
            new Promise((resolve) => setTimeout(() => resolve(false), 3000)),
        ]);
        res.destroy();
        assert.ok(closed, `attempt ${i + 1}: the connection of a cut-off stream is closed`);
    }
});

h.test('an answer head too large to read is a 502 that says so (was: "Out of memory")', async () => {
    /* 64 KiB: the proxy's own cap on a head; 200 KiB: past libcurl's cap on one header line. */
    for (const size of [70000, 200000]) {
        const body = h.chatBody(h.uniq(`big head ${size}`));
        const r = await env.proxy.post(CHAT, body, {'x-mock-header-size': String(size)});
        h.assertOpenAIError(r, 502);
        assert.match(r.json.error.message, /response head too large/, `${size}: ${r.text}`);
        assert.doesNotMatch(r.json.error.message, /memory/i, `${size}: ${r.text}`);
        h.assertFromUpstream(await env.proxy.post(CHAT, body), env.mock);
    }
});

h.test('the proxy keeps serving after upstream failures', async () => {
    assert.equal((await env.proxy.get('/healthz')).status, 200);
    const body = h.chatBody(h.uniq('still serving'));
    assert.equal((await env.proxy.post(CHAT, body)).status, 200);
    h.assertHit(await env.proxy.post(CHAT, body));
});

/*
 * A replica that takes connections and requests but never answers (a hung
 * server behind a live socket): its first call ends in the 504 of
 * upstream-timeout and is not sent again (the replica may be working on it),
 * but the replica is then left out as one that refuses connections is, and
 * afterwards let back one call at a time until it answers.
 */
h.test('a replica that reads requests and never answers is left out after one timeout', async () => {
    const received = [];
    const held = [];
    const hole = net.createServer((s) => {
        held.push(s);
        s.on('data', (d) => received.push(d.toString('latin1')));
        s.on('error', () => {});
    });
    await new Promise((resolve) => hole.listen(0, '127.0.0.1', resolve));
    const holeName = `127.0.0.1:${hole.address().port}`;
    const posts = () => received.join('').split('POST /').length - 1;
    const proxy = await env.startProxy({
        upstream: [`http://${holeName}`, env.mock.url], workers: 1,
        args: ['--routing', 'round-robin', '--upstream-timeout', String(UPSTREAM_TIMEOUT),
            '--upstream-fail-timeout', '3'],
    });
    try {
        const send = (i) => proxy.post(CHAT, h.chatBody(h.uniq(`black hole ${i}`)));
        const statuses = [];
        for (let i = 0; i < 6; i++)
            statuses.push((await send(i)).status);
        assert.deepEqual(statuses.filter((s) => s === 504).length, 1, `one timeout, then elsewhere: ${statuses}`);
        assert.equal(statuses.filter((s) => s === 200).length, 5);
        await h.waitFor(() => posts() === 1, {what: 'the one request the replica read'});
        let rep = (await proxy.stats()).replicas.find((x) => x.name === holeName);
        assert.equal(rep.healthy, false, 'left out for upstream-fail-timeout');
        assert.equal(rep.errors, 1);
        assert.equal(rep.connect_errors, 0, 'it never refused a connection');
        assert.match(proxy.stderr, new RegExp(`upstream ${holeName} .*upstream-timeout`));

        /* Back after upstream-fail-timeout, but only one call at a time until it answers. */
        await h.waitFor(async () => (await proxy.stats()).replicas.find((x) => x.name === holeName).healthy,
            {what: 'the replica to be tried again'});
        const again = await Promise.all([0, 1, 2, 3, 4, 5].map((i) => send(`again ${i}`)));
        const timedOut = again.filter((r) => r.status === 504).length;
        assert.equal(timedOut, 1, `one probe: ${again.map((r) => r.status)}`);
        assert.equal(posts(), 2, 'the replica read two requests in all');
        rep = (await proxy.stats()).replicas.find((x) => x.name === holeName);
        assert.equal(rep.errors, 2);
    } finally {
        await proxy.stop();
        held.forEach((s) => s.destroy());
        await new Promise((resolve) => hole.close(resolve));
    }
});

/* A separate proxy whose upstream is a port nobody listens on. */
h.test('an upstream that is down gives 502 in each API\'s shape', async () => {
    const closedPort = await h.freePort();
    const proxy = await env.startProxy({upstream: `http://127.0.0.1:${closedPort}`});
    const chat = await proxy.post(CHAT, h.chatBody(h.uniq('down')));
    h.assertOpenAIError(chat, 502);
    const stream = await proxy.post(CHAT, h.chatBody(h.uniq('down'), h.STREAM_WITH_USAGE));
    h.assertOpenAIError(stream, 502);
    const msg = await proxy.post(MESSAGES, h.messagesBody(h.uniq('down')));
    h.assertAnthropicError(msg, 502);
    const emb = await proxy.post('/v1/embeddings', h.embeddingBody(h.uniq('down')));
    h.assertOpenAIError(emb, 502);
    /* The rest of Anthropic's API passes through, and its errors are Anthropic's too: the
     * SDK's messages.countTokens and messages.batches, the legacy /v1/complete, and any
     * path a caller names with the anthropic-version header that API requires. */
    const count = await proxy.post('/v1/messages/count_tokens?beta=true', h.messagesBody(h.uniq('down')));
    h.assertAnthropicError(count, 502);
    h.assertAnthropicError(await proxy.get('/v1/messages/batches', {'x-api-key': 'sk-ant-down'}), 502);
    h.assertAnthropicError(await proxy.post('/v1/complete', {model: 'claude-2.1', prompt: 'x'}), 502);
    const antModels = await proxy.get('/v1/models', {'x-api-key': 'sk-ant-down', 'anthropic-version': '2023-06-01'});
    h.assertAnthropicError(antModels, 502);
    h.assertOpenAIError(await proxy.get('/v1/models', {authorization: 'Bearer sk-down'}), 502);
    h.assertOpenAIError(await proxy.get('/v1/messagesx'), 502);
    await h.eventually(async () => assert.ok((await proxy.stats()).upstream_errors >= 4));
    assert.equal(await proxy.stop(), 0);
});

/* doc/operations.md: the proxy variables of the environment apply to upstream calls, as in libcurl. */
h.test('upstream calls follow http_proxy, and NO_PROXY exempts a replica', async () => {
    const relay = await h.startMock(); /* takes the proxy's absolute-form requests and answers them */
    try {
        const via = await env.startProxy({env: {http_proxy: relay.url, NO_PROXY: ''}});
        const calls = [env.mock.callCount(CHAT), relay.callCount(CHAT)];
        assert.equal((await via.post(CHAT, h.chatBody(h.uniq('via http_proxy')))).status, 200);
        assert.deepEqual([env.mock.callCount(CHAT), relay.callCount(CHAT)], [calls[0], calls[1] + 1],
            'answered by the proxy of http_proxy');
        assert.match(relay.lastRequest(CHAT).url, /^http:\/\/127\.0\.0\.1:\d+\/v1\/chat\/completions$/);
        await via.stop();
        const direct = await env.startProxy({env: {http_proxy: relay.url, NO_PROXY: '127.0.0.1'}});
        assert.equal((await direct.post(CHAT, h.chatBody(h.uniq('NO_PROXY')))).status, 200);
        assert.deepEqual([env.mock.callCount(CHAT), relay.callCount(CHAT)], [calls[0] + 1, calls[1] + 1],
            'NO_PROXY: straight to the upstream');
        await direct.stop();
    } finally {
        await relay.close();
    }
});
