'use strict';
/*
 * Three proxy instances on one Redis share what they learn: an exact entry
 * stored through A hits through B and C; a semantic entry stored through B
 * is a semantic hit through A and C (its vector reaches them through the
 * Redis Stream); a prefix recorded through C routes the conversation the
 * same way through A and B (mock vLLM replicas); and `promptcache report`
 * sums the three instances' request and token counters.
 */
const assert = require('node:assert/strict');
const h = require('./lib');
const {startVllmMock} = require('../mock/vllm');
const {createSemanticMock} = require('../mock/semantic');

const env = h.environment({proxy: false});
const CHAT = '/v1/chat/completions';
const NO_STORE = {'cache-control': 'no-store'};

let sem = null;
let reps = [];
let A = null;
let B = null;
let C = null;

const body = (text) => ({model: 'mock-vllm', max_tokens: 4,
    messages: [{role: 'system', content: 'You are terse.'}, {role: 'user', content: text}]});

function conversation(topic, n) {
    const messages = [{role: 'user', content: `${topic}: ${'context '.repeat(600)}`}];
    for (let i = 1; i < n; i++)
        messages.push({role: 'assistant', content: `answer ${i}`}, {role: 'user', content: `${topic} follow-up ${i}`});
    return {model: 'mock-vllm', messages, max_tokens: 4};
}

function assertMiss(r) {
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-cache-status'], 'MISS', 'X-Cache-Status');
}

function assertSemanticHit(r) {
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-cache-status'], 'HIT', 'X-Cache-Status');
    assert.equal(r.headers['x-cache-match'], 'semantic', 'X-Cache-Match');
}

h.test('set up: three instances, one Redis, three vLLM replicas, one embedder', async () => {
    sem = await createSemanticMock().listen();
    for (let i = 0; i < 3; i++)
        reps.push(await startVllmMock({name: `v${i}`, usPerToken: 0, usPerOutputToken: 0}));
    const start = () => env.startProxy({upstream: reps.map((r) => r.url), workers: 2,
        args: ['--upstream-type', 'vllm', '--semantic', 'yes', '--semantic-max-error', 'off', '--embedder', 'openai',
            '--embedder-url', sem.url, '--embedder-model', 'mock-bow', '--semantic-threshold', '0.9']});
    [A, B, C] = [await start(), await start(), await start()];
    /* With a remote embedder, an instance's vector index (and its reader of the stream)
     * starts with its first embedding: one question each, then wait until in step. */
    for (const p of [A, B, C]) {
        assert.equal((await p.post(CHAT, body(h.uniq('warm up')), NO_STORE)).status, 200);
        await h.waitFor(async () => (await p.stats()).semantic_sync_ready === true,
            {what: 'the vector reader in step'});
    }
});

h.test('an exact entry stored through A hits through B and C', async () => {
    const q = body(h.uniq('exact shared'));
    const first = await A.post(CHAT, q);
    assertMiss(first);
    for (const p of [B, C]) {
        const r = await p.post(CHAT, q);
        h.assertHit(r);
        assert.deepEqual(r.json.choices, first.json.choices, 'the answer A stored');
    }
});

h.test('a semantic entry stored through B is a semantic hit through A and C', async () => {
    /* The rewording keeps the same words (the mock embeds a signed bag of words in 64
     * buckets): with one word more or less, a random tag sharing a bucket with it dropped
     * the cosine under 0.9 for about 4% of tags. */
    const tag = h.uniq('t').split(' ')[1];
    const first = await B.post(CHAT, body(`how tall is mount everest ${tag}`));
    assertMiss(first);
    /*
     * A and C learn of the vector through the stream (no request waits for it). They are
     * asked until they hit: a count of applied stream events could be moved by the earlier
     * test's vector arriving late, and a no-store miss stores nothing, so asking again is safe.
     */
    for (const [name, p] of [['A', A], ['C', C]]) {
        try {
            await h.eventually(async () => {
                const r = await p.post(CHAT, body(`mount everest: how tall is ${tag}`), NO_STORE);
                assertSemanticHit(r);
                assert.deepEqual(r.json.choices, first.json.choices, 'the answer B stored');
            }, {timeout: 5000});
        } catch (e) {
            const st = await p.stats();
            const sem = Object.fromEntries(Object.entries(st).filter(([k]) => /^semantic_|^cache_/.test(k)));
            e.message += ` (${name}: ${JSON.stringify(sem)})`;
            throw e;
        }
    }
});

/* The one vector record Redis has for an entry whose question has this tag. */
async function vectorKey(before) {
    return h.waitFor(async () => {
        const keys = (await env.redis.keys('pc:2:v:*')).filter((k) => !before.has(k));
        return keys.length === 1 ? keys[0] : null;
    }, {what: 'the new vector record'});
}

h.test('a refresh through B replaces the answer in A\'s L1 and the vector everywhere', async () => {
    const tag = h.uniq('t').split(' ')[1];
    const q = body(`how far away is the moon ${tag}`);
    const reworded = body(`the moon: how far away is ${tag}`);
    const before = new Set(await env.redis.keys('pc:2:v:*'));
    const first = await B.post(CHAT, q);
    assertMiss(first);
    const vkey = await vectorKey(before);
    /*
     * A finds it by meaning first: the vector reached A's index by the stream's "add", which
     * B puts on the stream after its "set" (the event that drops every other instance's copy
     * of the key), so A has applied the "set" too. A copy read into A's L1 before that would
     * be dropped by it, maybe after the hit below, and A would answer the refreshed answer
     * whether or not the refresh's own event reached it. Asked with no-store (a miss stores
     * nothing), so asking again is safe.
     */
    await h.eventually(async () => assertSemanticHit(await A.post(CHAT, reworded, NO_STORE)),
        {timeout: 5000});
    /* A holds the answer in its L1 (a hit counted in l1_hits) and C finds it by meaning. */
    await h.waitFor(async () => {
        const s0 = await A.stats();
        h.assertHit(await A.post(CHAT, q));
        return (await A.stats()).l1_hits > s0.l1_hits;
    }, {what: 'a hit from A\'s L1'});
    await h.eventually(async () => assertSemanticHit(await C.post(CHAT, reworded, NO_STORE)),
        {timeout: 5000});

    /* B refreshes with a shorter TTL: A answers the new answer, and the vector has the new TTL. */
    const fresh = await B.post(CHAT, q, {'cache-control': 'no-cache', 'x-cache-ttl': '600'});
    assert.equal(fresh.headers['x-cache-status'], 'REFRESH');
    assert.notEqual(fresh.json.id, first.json.id);
    await h.waitFor(async () => (await A.post(CHAT, q)).json.id === fresh.json.id,
        {what: 'A to answer the refreshed answer'});
    await h.waitFor(async () => {
        const ms = Number(await env.redis.command('PTTL', vkey));
        return ms > 0 && ms <= 600000;
    }, {what: 'the vector record to take the new TTL'});

    /* Refreshed again, as a request that may not be found by meaning: its vector goes, so no
     * instance serves it by meaning any more (the reworded question is a miss everywhere). */
    const exact = await B.post(CHAT, q, {'cache-control': 'no-cache', 'x-cache-mode': 'exact'});
    assert.equal(exact.headers['x-cache-status'], 'REFRESH');
    await h.waitFor(async () => Number(await env.redis.command('EXISTS', vkey)) === 0,
        {what: 'the old vector record deleted'});
    for (const p of [A, C])
        await h.waitFor(async () => (await p.post(CHAT, reworded, NO_STORE)).headers['x-cache-status'] === 'MISS',
            {what: 'the reworded question to miss'});
    await h.waitFor(async () => (await A.post(CHAT, q)).json.id === exact.json.id,
        {what: 'A to answer the last answer'});
});

h.test('a prefix recorded through C routes the conversation the same way through A and B', async () => {
    const topic = h.uniq('shared prefix');
    /* The tokens each instance's index holds per replica: C's record adds the topic's ~1200 to
     * the replica it chose, which no record of the earlier tests (short prompts) could; a count
     * of applied records could be moved by an earlier test's record arriving late. */
    const held = async (p) => Object.fromEntries((await p.stats()).replicas.map((x) => [x.name, x.index_tokens]));
    const before = {A: await held(A), B: await held(B)};
    const r1 = await C.post(CHAT, conversation(topic, 1), NO_STORE);
    assert.equal(r1.status, 200, r1.text);
    const home = r1.headers['x-upstream'];
    await h.waitFor(async () => (await held(A))[home] >= before.A[home] + 1000 &&
        (await held(B))[home] >= before.B[home] + 1000, {what: 'A and B applying C\'s record'});
    for (const [turn, p] of [[2, A], [3, B], [4, A]]) {
        const r = await p.post(CHAT, conversation(topic, turn), NO_STORE);
        assert.equal(r.status, 200, r.text);
        assert.equal(r.headers['x-upstream'], home, `turn ${turn}`);
        assert.ok(r.json.usage.prompt_tokens_details.cached_tokens > 1000,
            `turn ${turn} reuses the replica's KV cache: ${JSON.stringify(r.json.usage)}`);
    }
    const st = await A.stats();
    const rep = st.replicas.find((x) => x.name === home);
    assert.ok(rep.routed_by_prefix >= 2, JSON.stringify(rep));
});

h.test('promptcache report sums the three instances\' counters', async () => {
    const sum = async (keys) => {
        const all = await Promise.all([A, B, C].map((p) => p.stats()));
        return Object.fromEntries(keys.map((k) => [k, all.reduce((s, st) => s + st[k], 0)]));
    };
    const want = await sum(['cache_hits', 'cache_hits_semantic', 'cache_misses', 'cache_bypasses',
        'cache_refreshes', 'tokens_saved_prompt', 'tokens_saved_completion', 'tokens_upstream_prompt',
        'tokens_upstream_completion']);
    const requests = want.cache_hits + want.cache_misses + want.cache_bypasses + want.cache_refreshes;
    assert.ok(want.cache_hits >= 4 && want.cache_hits_semantic >= 2, JSON.stringify(want));
    /* each worker flushes its counts about once a second */
    const j = await h.waitFor(async () => {
        const r = await h.runCli(['report', '--redis', env.redis.url, '--format', 'json']);
        assert.equal(r.code, 0, r.output);
        const t = JSON.parse(r.stdout);
        return t.total.requests >= requests && t.total.upstream_prompt_tokens >= want.tokens_upstream_prompt
            ? t : null;
    }, {timeout: 15000, what: `the report to count ${requests} requests`});
    const t = j.total;
    assert.equal(t.requests, requests);
    assert.equal(t.errors, 0);
    assert.equal(t.hits, want.cache_hits);
    assert.equal(t.semantic_hits, want.cache_hits_semantic);
    assert.equal(t.misses, want.cache_misses);
    assert.equal(t.bypasses, want.cache_bypasses + want.cache_refreshes);
    assert.equal(t.saved_prompt_tokens, want.tokens_saved_prompt);
    assert.equal(t.saved_completion_tokens, want.tokens_saved_completion);
    assert.equal(t.upstream_prompt_tokens, want.tokens_upstream_prompt);
    assert.equal(t.upstream_completion_tokens, want.tokens_upstream_completion);
});

h.test('tear down', async () => {
    await Promise.all([A, B, C].filter(Boolean).map((p) => p.stop()));
    await Promise.all(reps.map((r) => r.close()));
    if (sem)
        await sem.close();
});
