'use strict';
/*
 * The mock vLLM replica (tests/mock/vllm.js), which the prefix-routing tests
 * and bench/prefix-replay rely on: its block-level prefix cache (cached
 * tokens, LRU eviction at capacity, cache_salt), usage in JSON and streams,
 * /metrics in Prometheus text with vLLM's names, queueing past max-running,
 * and the request bookkeeping. Needs no proxy binary.
 *
 * Prompts go to /v1/completions (no chat template) as 4N ASCII bytes, so a
 * prompt is exactly N tokens and block arithmetic is exact: with 16-token
 * blocks a repeated 160-token prompt has 144 cached tokens (the last token is
 * always computed), and one that extends it by 32 tokens has 160.
 */
const {after} = require('node:test');
const assert = require('node:assert/strict');
const h = require('./lib');
const {startVllmMock} = require('../mock/vllm');
const {renderChat, countTokens} = require('../mock/kvcache');

const mocks = [];
after(() => Promise.all(mocks.map((m) => m.close())));

async function replica(opts = {}) {
    const m = await startVllmMock({usPerToken: 0, usPerOutputToken: 0, ...opts});
    mocks.push(m);
    return m;
}

/* A prompt of exactly n tokens whose text depends on tag (distinct tags share no block). */
function tokens(tag, n) {
    let s = '';
    for (let i = 0; s.length < 4 * n; i++)
        s += `${tag}-${i} `;
    return s.slice(0, 4 * n);
}

const post = (m, path, body, headers) => h.request(m.url, {method: 'POST', path, body, headers});
const complete = (m, prompt, extra = {}) => post(m, '/v1/completions', {model: 'm', prompt, max_tokens: 2, ...extra});
const cachedOf = (r) => r.json.usage.prompt_tokens_details.cached_tokens;

/* name -> value of every sample of a Prometheus text; each line must be a comment or one sample. */
function parseMetrics(text) {
    const samples = new Map();
    for (const line of text.split('\n')) {
        if (line === '' || line.startsWith('# HELP ') || line.startsWith('# TYPE '))
            continue;
        const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (-?[0-9.e+]+)$/.exec(line);
        assert.ok(m, `not a Prometheus sample line: ${JSON.stringify(line)}`);
        samples.set(m[1] + (m[2] || ''), Number(m[3]));
    }
    return samples;
}

function metric(samples, name) {
    const hits = [...samples].filter(([k]) => k === name || k.startsWith(name + '{'));
    assert.equal(hits.length, 1, `one sample of ${name}`);
    return hits[0][1];
}

h.test('cached tokens grow for a repeated prefix, in whole blocks', async () => {
    const m = await replica();
    const base = tokens('grow', 160);
    const first = await complete(m, base);
    assert.equal(first.status, 200);
    assert.equal(first.json.usage.prompt_tokens, 160);
    assert.equal(cachedOf(first), 0);
    assert.equal(cachedOf(await complete(m, base)), 144, 'all but the block holding the last token');
    const longer = await complete(m, base + tokens('more', 32));
    assert.equal(longer.json.usage.prompt_tokens, 192);
    assert.equal(cachedOf(longer), 160);
    const diverging = await complete(m, base.slice(0, 4 * 40) + tokens('other', 120));
    assert.equal(cachedOf(diverging), 32, 'only the blocks before the first difference');
    assert.equal(first.headers['x-mock-replica'], m.name);
});

h.test('eviction at capacity drops the least recently used blocks', async () => {
    /* Room for 8 blocks; each prompt fills 4 (65 tokens: 4 full blocks and one token). */
    const m = await replica({capacityTokens: 8 * 16});
    const [a, b, c] = ['lru-a', 'lru-b', 'lru-c'].map((t) => tokens(t, 65));
    await complete(m, a);
    await complete(m, b);
    assert.equal(cachedOf(await complete(m, a)), 64, 'a and b both fit');
    await complete(m, c); /* evicts b, the least recently used */
    assert.equal(m.stats().cache.evicted_blocks, 4);
    assert.equal(cachedOf(await complete(m, a)), 64, 'a was used after b');
    assert.equal(cachedOf(await complete(m, b)), 0, 'b was evicted');
    assert.ok(m.stats().cache.used_blocks <= 8);
});

h.test('cache_salt separates caches, and hint fields and headers are recorded', async () => {
    const m = await replica({name: 'salted'});
    const p = tokens('salt', 100);
    await complete(m, p, {cache_salt: 'tenant-a'});
    assert.equal(cachedOf(await complete(m, p, {cache_salt: 'tenant-b'})), 0);
    assert.equal(cachedOf(await complete(m, p)), 0, 'no salt is a salt of its own');
    assert.equal(cachedOf(await complete(m, p, {cache_salt: 'tenant-a'})), 96);
    await complete(m, p, {prompt_cache_key: 'pck-1'});
    await post(m, '/v1/completions', {model: 'm', prompt: p, user: 'u1'},
        {'x-user-id': 'user-7', 'x-smg-routing-key': 'rk-1', 'X-data-parallel-rank': '1'});
    const r = await h.request(m.url, {method: 'GET', path: '/__mock/requests'});
    const recs = r.json.requests;
    assert.equal(r.json.name, 'salted');
    assert.equal(recs[0].fields.cache_salt, 'tenant-a');
    assert.equal(recs[4].fields.prompt_cache_key, 'pck-1');
    const last = recs[recs.length - 1];
    assert.equal(last.fields.user, 'u1');
    assert.equal(last.headers['x-user-id'], 'user-7');
    assert.equal(last.headers['x-smg-routing-key'], 'rk-1');
    assert.equal(last.headers['x-data-parallel-rank'], '1');
    assert.equal(last.cached_tokens, 96);
});

h.test('usage in JSON and in the last chunk of a stream agree', async () => {
    const m = await replica();
    const messages = [{role: 'system', content: tokens('sys', 64)}, {role: 'user', content: 'hello there'}];
    const want = countTokens(renderChat(messages));
    const json = await post(m, '/v1/chat/completions', {model: 'm', messages, max_tokens: 5});
    assert.equal(json.json.object, 'chat.completion');
    assert.deepEqual(json.json.usage, {prompt_tokens: want, completion_tokens: 5, total_tokens: want + 5,
        prompt_tokens_details: {cached_tokens: 0}});
    assert.equal(json.json.choices[0].message.content, 'tok '.repeat(5));
    assert.equal(json.json.choices[0].finish_reason, 'length');
    const streamed = await post(m, '/v1/chat/completions', {model: 'm', messages, max_tokens: 40,
        stream: true, stream_options: {include_usage: true}});
    assert.match(streamed.headers['content-type'], /^text\/event-stream/);
    const events = h.parseSSE(streamed.text);
    assert.equal(events[events.length - 1].data, '[DONE]');
    const last = JSON.parse(events[events.length - 2].data);
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.prompt_tokens, want);
    assert.equal(last.usage.completion_tokens, 40);
    assert.equal(last.usage.prompt_tokens_details.cached_tokens, Math.floor((want - 1) / 16) * 16);
    const text = events.slice(0, -2).map((e) => JSON.parse(e.data).choices[0].delta.content || '').join('');
    assert.equal(text, 'tok '.repeat(40));
    const plain = await post(m, '/v1/completions', {model: 'm', prompt: 'abcd', stream: true});
    const plainEvents = h.parseSSE(plain.text);
    assert.ok(plainEvents.every((e) => e.data === '[DONE]' || !('usage' in JSON.parse(e.data))),
        'no usage without include_usage');
});

h.test('/metrics is Prometheus text with vLLM names; counters are monotonic', async () => {
    const m = await replica({model: 'llama-mock'});
    const scrape = async () => {
        const r = await h.request(m.url, {method: 'GET', path: '/metrics'});
        assert.equal(r.status, 200);
        assert.match(r.headers['content-type'], /^text\/plain/);
        return parseMetrics(r.text);
    };
    const before = await scrape();
    const p = tokens('metrics', 48);
    const answers = [await complete(m, p), await complete(m, p), await complete(m, p + tokens('x', 16))];
    const after1 = await scrape();
    const sum = (f) => answers.reduce((n, r) => n + f(r.json.usage), 0);
    const delta = (name) => metric(after1, name) - metric(before, name);
    assert.equal(delta('vllm:prefix_cache_queries_total'), sum((u) => u.prompt_tokens));
    assert.equal(delta('vllm:prefix_cache_hits_total'), sum((u) => u.prompt_tokens_details.cached_tokens));
    assert.equal(delta('vllm:generation_tokens_total'), sum((u) => u.completion_tokens));
    assert.equal(metric(after1, 'vllm:num_requests_running'), 0);
    assert.ok([...after1.keys()].some((k) => k.includes('model_name="llama-mock"')));
    await complete(m, tokens('later', 20));
    const after2 = await scrape();
    for (const [k, v] of after1)
        if (k.split('{')[0].endsWith('_total'))
            assert.ok(after2.get(k) >= v, `${k} did not go down`);
});

h.test('past max-running, requests wait; a client that leaves frees its place', async () => {
    /* One token of decode takes an hour: the first request runs until its client leaves. */
    const m = await replica({maxRunning: 1, usPerOutputToken: 3600e6});
    const first = await h.openStream(m.url, {method: 'POST', path: '/v1/completions',
        body: {model: 'm', prompt: tokens('q1', 20), max_tokens: 2, stream: true}});
    await first.nextEvent(); /* the first token came: it runs */
    const second = h.beginRequest(m.url, {method: 'POST', path: '/v1/completions',
        body: {model: 'm', prompt: tokens('q2', 20), max_tokens: 1}});
    await h.waitFor(() => m.stats().waiting === 1, {what: 'a waiting request'});
    const samples = parseMetrics(m.metricsText());
    assert.equal(metric(samples, 'vllm:num_requests_running'), 1);
    assert.equal(metric(samples, 'vllm:num_requests_waiting'), 1);
    first.destroy();
    const res = await second.response;
    assert.equal(res.statusCode, 200);
    res.resume();
    assert.equal(m.stats().aborted, 1);
    assert.equal(m.stats().running, 0);
});

h.test('health, models, bad requests and unknown paths', async () => {
    const m = await replica({model: 'served-model'});
    assert.equal((await h.request(m.url, {method: 'GET', path: '/health'})).status, 200);
    const models = await h.request(m.url, {method: 'GET', path: '/v1/models'});
    assert.equal(models.json.data[0].id, 'served-model');
    const bad = await post(m, '/v1/chat/completions', {model: 'm', messages: []});
    assert.equal(bad.status, 400);
    assert.equal(typeof bad.json.error.message, 'string');
    assert.equal((await post(m, '/v1/completions', {model: 'm', prompt: 'x', max_tokens: 0})).status, 400);
    assert.equal((await h.request(m.url, {method: 'GET', path: '/nowhere'})).status, 404);
    assert.equal(m.stats().rejected, 2);
    await complete(m, tokens('kept', 40));
    assert.ok(m.stats().cache.used_blocks > 0);
    assert.equal((await post(m, '/__mock/reset', {})).status, 200);
    assert.equal(m.stats().requests, 0);
    assert.equal(m.stats().cache.used_blocks, 0, 'reset empties the cache');
    assert.equal(cachedOf(await complete(m, tokens('kept', 40))), 0);
});
