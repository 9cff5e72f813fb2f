'use strict';
/*
 * The mock upstream's own behaviour, which every other test relies on: its
 * x-mock-* controls, its bookkeeping (calls, requests, aborted responses,
 * backpressure) and its control endpoints. Needs no proxy binary.
 */
const {before, after} = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const h = require('./lib');

let mock;
before(async () => {
    mock = await h.startMock();
});
after(() => mock.close());

const CHAT = '/v1/chat/completions';
const post = (path, body, headers) => h.request(mock.url, {method: 'POST', path, body, headers});
const stream = (path, body, headers) => h.openStream(mock.url, {method: 'POST', path, body, headers});
const sha = (s) => crypto.createHash('sha256').update(s).digest('hex');

h.test('answers quote the call number and the start of the last user message', async () => {
    const long = 'a question that is definitely longer than forty characters in total';
    const r = await post(CHAT, h.chatBody(long));
    const seq = mock.lastRequest(CHAT).seq;
    assert.equal(h.chatText(r.json), `mock answer #${seq} to: ${long.slice(0, 40)}`);
    const again = await post(CHAT, h.chatBody(long));
    assert.equal(h.answerSeq(h.chatText(again.json)), seq + 1, 'every call gets a new number');
});

h.test('calls are counted in total and per path, requests recorded', async () => {
    const total = mock.callCount();
    const body = h.embeddingBody('count me');
    await post('/v1/embeddings', body, {'x-extra': 'yes'});
    await h.request(mock.url, {method: 'GET', path: '/v1/models'});
    assert.equal(mock.callCount(), total + 2);
    const rec = mock.lastRequest('/v1/embeddings');
    assert.equal(rec.method, 'POST');
    assert.deepEqual(rec.body, body);
    assert.equal(rec.headers['x-extra'], 'yes');
});

h.test('x-mock-status answers an error in each dialect\'s shape', async () => {
    h.assertOpenAIError(await post(CHAT, h.chatBody('e', {stream: true}), {'x-mock-status': '503'}), 503);
    h.assertAnthropicError(await post('/v1/messages', h.messagesBody('e'), {'x-mock-status': '429'}), 429);
    h.assertOpenAIError(await h.request(mock.url, {method: 'GET', path: '/nowhere'}), 404);
});

h.test('x-mock-delay-ms delays the response head', async () => {
    const started = Date.now();
    await post(CHAT, h.chatBody('slow'), {'x-mock-delay-ms': '300'});
    assert.ok(Date.now() - started >= 290);
});

h.test('x-mock-chunks and x-mock-chunk-delay-ms shape the stream', async () => {
    const started = Date.now();
    const r = await post(CHAT, h.chatBody('pieces', h.STREAM_WITH_USAGE),
        {'x-mock-chunks': '7', 'x-mock-chunk-delay-ms': '40'});
    const a = h.assembleChat(h.parseSSE(r.text));
    const pieces = a.chunks.filter((c) => c.choices.length && typeof c.choices[0].delta.content === 'string' &&
        c.choices[0].delta.content !== '');
    assert.equal(pieces.length, 7);
    assert.ok(a.done && a.usage);
    assert.ok(Date.now() - started >= 40 * (a.chunks.length), 'a delay between every two events');
});

h.test('x-mock-stamp opens every stream event with its write time on the monotonic clock', async () => {
    const before = process.hrtime.bigint();
    const r = await post(CHAT, h.chatBody('stamped', h.STREAM_WITH_USAGE),
        {'x-mock-chunks': '5', 'x-mock-chunk-delay-ms': '5', 'x-mock-stamp': '1'});
    const after = process.hrtime.bigint();
    const events = r.text.split('\n\n').filter((e) => e !== '');
    assert.ok(events.length >= 5);
    let last = before;
    for (const e of events) {
        const m = /^: t=(\d+)\ndata: /.exec(e);
        assert.ok(m, `an event that does not open with a stamp: ${JSON.stringify(e)}`);
        const t = BigInt(m[1]);
        assert.ok(t >= last && t <= after, 'stamps between the request and the answer, in order');
        last = t;
    }
    assert.ok(last - before >= 5n * 4n * 1000000n, 'the pauses lie between the stamps');
    /* Comment lines are not data: the answer reads the same. */
    assert.ok(h.assembleChat(h.parseSSE(r.text)).done);
    const plain = await post(CHAT, h.chatBody('unstamped', {stream: true}));
    assert.ok(!plain.text.includes(': t='), 'no stamps unless asked');
});

h.test('x-mock-echo quotes the whole question and names the credential and tag', async () => {
    const q = 'An echoed question that is well over forty characters long, to the end';
    const authOf = (cred) => sha(cred).slice(0, 8);
    const a = await post(CHAT, h.chatBody(q), {authorization: 'Bearer sk-a', 'x-mock-echo': '1'});
    assert.match(JSON.parse(a.text).choices[0].message.content,
        new RegExp(`^mock answer #\\d+ to: ${q} \\[auth ${authOf('Bearer sk-a')}\\]$`));
    const b = await post(CHAT, h.chatBody(q, {stream: true}),
        {authorization: 'Bearer sk-b', 'x-mock-echo': '1', 'x-mock-tag': 'ns1'});
    assert.match(h.assembleChat(h.parseSSE(b.text)).content,
        new RegExp(`^mock answer #\\d+ to: ${q} \\[auth ${authOf('Bearer sk-b')} tag ns1\\]$`));
    const plain = await post(CHAT, h.chatBody(q), {authorization: 'Bearer sk-a', 'x-mock-tag': 'ns1'});
    assert.match(JSON.parse(plain.text).choices[0].message.content, /^mock answer #\d+ to: .{40}$/,
        'without x-mock-echo: the first 40 characters, no credential');
});

h.test('x-mock-size gives an answer of that many bytes, recorded by hash', async () => {
    const r = await post('/v1/messages', h.messagesBody('big', {stream: true}), {'x-mock-size': '200000'});
    const text = h.messageText(h.assembleMessage(h.parseSSE(r.text)).message);
    assert.equal(text.length, 200000);
    assert.equal(sha(text), mock.lastRequest('/v1/messages').answer.sha256);
});

h.test('x-mock-cut cuts a JSON body and a stream half-way; not counted as aborted', async () => {
    const aborted = mock.aborted;
    await assert.rejects(post(CHAT, h.chatBody('cut json'), {'x-mock-cut': '1'}), /cut off|hang up|aborted/);
    const s = await stream(CHAT, h.chatBody('cut stream', {stream: true}), {'x-mock-cut': '1'});
    const end = await s.rest();
    assert.ok(!end.complete);
    assert.ok(end.events.length > 0 && !h.assembleChat(end.events).done);
    assert.equal(mock.aborted, aborted);
});

h.test('x-mock-hold holds a stream after its first event until released over HTTP', async () => {
    const s = await stream(CHAT, h.chatBody('held', {stream: true}), {'x-mock-hold': 'held-1'});
    const first = await s.nextEvent();
    assert.equal(JSON.parse(first.data).choices[0].delta.role, 'assistant');
    await mock.waitForHold('held-1');
    const rel = await h.request(mock.url, {method: 'POST', path: '/__mock/release?id=held-1'});
    assert.deepEqual(rel.json, {released: 'held-1', waiting: 1});
    const end = await s.rest();
    assert.ok(end.complete && h.assembleChat(end.events).done);
    assert.ok(!mock.isHolding('held-1'));
});

h.test('x-mock-hold on a JSON answer sends half the body first', async () => {
    const s = await stream(CHAT, h.chatBody('held json'), {'x-mock-hold': 'held-json'});
    await mock.waitForHold('held-json');
    await h.waitFor(() => s.bytes > 0, {what: 'the first half of the body'});
    assert.ok(s.bytes < Number(s.headers['content-length']));
    mock.release('held-json');
    const end = await s.rest();
    assert.match(h.chatText(JSON.parse(end.text)), /held json/);
});

h.test('x-mock-hold-head holds the answer before its head until released', async () => {
    let settled = false;
    const pending = post(CHAT, h.chatBody('held head'), {'x-mock-hold-head': 'held-head'});
    pending.then(() => (settled = true));
    await mock.waitForHold('held-head');
    assert.equal(settled, false, 'nothing answered while held');
    mock.release('held-head');
    const r = await pending;
    assert.equal(r.status, 200);
    assert.match(h.chatText(r.json), /held head/);
});

h.test('bookkeeping members the real APIs refuse get their 400, in each API\'s shape', async () => {
    const bad = [{service_tier: 'bogus'}, {user: 7}, {store: 'yes'},
        {metadata: Object.fromEntries(Array.from({length: 17}, (_, i) => [`k${i}`, 'v']))}];
    const params = ['service_tier', 'user', 'store', 'metadata'];
    for (const [i, extra] of bad.entries()) {
        const r = await post(CHAT, h.chatBody('refused', extra));
        h.assertOpenAIError(r, 400);
        assert.equal(r.json.error.param, params[i]);
    }
    const ok = {service_tier: 'flex', user: 'u', store: true, metadata: {a: 'b'}};
    assert.equal((await post(CHAT, h.chatBody('accepted', ok))).status, 200);
    for (const extra of [{service_tier: 'bogus'}, {metadata: {user_id: 'u', team: 't'}}]) {
        const r = await post('/v1/messages', h.messagesBody('refused', extra));
        h.assertAnthropicError(r, 400);
        assert.match(r.json.error.message, /^(service_tier|metadata\.team): /);
    }
    const okMsg = h.messagesBody('accepted', {service_tier: 'auto', metadata: {user_id: 'u'}});
    assert.equal((await post('/v1/messages', okMsg)).status, 200);
});

h.test('a release that comes before the request does not hold it', async () => {
    mock.release('early-bird');
    const r = await post(CHAT, h.chatBody('early', {stream: true}), {'x-mock-hold': 'early-bird'});
    assert.ok(h.assembleChat(h.parseSSE(r.text)).done);
});

h.test('a client that hangs up is counted as an aborted response', async () => {
    const aborted = mock.aborted;
    const s = await stream(CHAT, h.chatBody('leaving', {stream: true}), {'x-mock-hold': 'leaving'});
    await s.nextEvent();
    await mock.waitForHold('leaving');
    s.destroy();
    await mock.waitForAborted(aborted + 1);
    assert.ok(!mock.isHolding('leaving'), 'a response whose client left is no longer held');
    assert.equal(mock.lastRequest(CHAT).aborted, true);
});

h.test('a paused client makes the mock wait for drain', async () => {
    const total = 8000000;
    const before = {...mock.backpressure};
    const s = await stream(CHAT, h.chatBody('pause me', {stream: true}), {'x-mock-size': String(total)});
    s.pause();
    await h.waitFor(() => mock.backpressure.waits > before.waits, {what: 'a drain wait'});
    assert.ok(mock.backpressure.bytesWritten - before.bytesWritten < total, 'the writes stalled');
    const end = await s.rest();
    assert.equal(h.assembleChat(end.events).content.length, total);
});

h.test('embeddings are deterministic unit vectors', async () => {
    const a = await post('/v1/embeddings', h.embeddingBody(['same', 'other']));
    const b = await post('/v1/embeddings', h.embeddingBody('same'));
    const [va, vo] = a.json.data.map((d) => d.embedding);
    assert.deepEqual(b.json.data[0].embedding, va);
    assert.notDeepEqual(va, vo);
    assert.ok(Math.abs(Math.hypot(...va) - 1) < 1e-6);
});

h.test('embeddings take "dimensions"; 8 without it', async () => {
    const long = await post('/v1/embeddings', h.embeddingBody('same', {dimensions: 1536}));
    const short = await post('/v1/embeddings', h.embeddingBody('same'));
    const v = long.json.data[0].embedding;
    assert.equal(v.length, 1536);
    assert.equal(short.json.data[0].embedding.length, 8);
    assert.ok(Math.abs(Math.hypot(...v) - 1) < 1e-6);
});

h.test('GET /__mock/stats and POST /__mock/reset', async () => {
    await post(CHAT, h.chatBody('before reset'));
    const stats = (await h.request(mock.url, {method: 'GET', path: '/__mock/stats'})).json;
    assert.ok(stats.calls.total > 0 && stats.calls.byPath[CHAT] > 0);
    assert.ok(Array.isArray(stats.requests) && stats.requests.length === stats.calls.total);
    assert.equal(typeof stats.aborted, 'number');
    assert.equal(typeof stats.backpressure.waits, 'number');
    await h.request(mock.url, {method: 'POST', path: '/__mock/reset'});
    assert.equal(mock.callCount(), 0, 'control requests are not counted as calls');
    const r = await post(CHAT, h.chatBody('after reset'));
    assert.equal(h.answerSeq(h.chatText(r.json)), 1, 'numbering restarts');
});
