'use strict';
/*
 * Forged vector records and events (pc:2:v:{...} and pc:2:vs) in a real
 * redis-server: what another writer puts there is input. A partition is one
 * tenant's (its hash names the tenant), so a vector of another tenant found
 * in it can only be forged, and is never a candidate: a record copied under
 * tenant A's entry with tenant B's partition, announced on the stream, used
 * to serve A's stored answer to B's question.
 */
const assert = require('node:assert/strict');
const h = require('./lib');
const {createSemanticMock} = require('../mock/semantic');

const env = h.environment({proxy: false});
const CHAT = '/v1/chat/completions';
const NO_STORE = {'cache-control': 'no-store'};
const A = {authorization: 'Bearer sk-tenant-a-forgery'};
const B = {authorization: 'Bearer sk-tenant-b-forgery'};

let sem = null;
let proxy = null;

function semArgs(extra = []) {
    return ['--semantic', 'yes', '--semantic-max-error', 'off', '--embedder', 'openai',
        '--embedder-url', sem.url, '--embedder-model', 'mock-bow', '--semantic-threshold', '0.9',
        ...extra];
}

const chat = (text) => h.chatBody(text);
const text = (r) => r.json.choices[0].message.content;

/* The one key matching pattern (waited for: the vector is written after the answer). */
async function oneKey(pattern) {
    return h.waitFor(async () => {
        const keys = await env.redis.keys(pattern);
        return keys.length === 1 ? keys[0] : null;
    }, {what: `one key ${pattern}`});
}

const tenantOf = (vkey) => /^pc:2:v:\{([0-9a-f]{16}):([0-9a-f]{64})\}$/.exec(vkey);

h.test('set up', async () => {
    sem = await createSemanticMock().listen();
    proxy = await env.startProxy({args: semArgs()});
});

h.test('a forged record and event naming another tenant\'s entry never serve it to this tenant', async () => {
    const t = h.uniq('t').split(' ')[1];
    const secret = `the launch code of tenant a is ${t}`;
    const qb = `what is the capital of france ${t}`;
    const ra = await proxy.post(CHAT, chat(secret), A);
    assert.equal(ra.headers['x-cache-status'], 'MISS');
    const va = await oneKey('pc:2:v:*');
    const rb = await proxy.post(CHAT, chat(qb), B);
    assert.equal(rb.headers['x-cache-status'], 'MISS');
    await h.waitFor(async () => (await env.redis.keys('pc:2:v:*')).length === 2, {what: 'B\'s vector'});
    const vb = (await env.redis.keys('pc:2:v:*')).find((k) => k !== va);
    const [, ta, ka] = tenantOf(va);
    const [, tb, kb] = tenantOf(vb);
    assert.notEqual(ta, tb);
    /* B's partition is in memory (its own lookup loaded it): the forged add is applied. */
    await h.eventually(async () => {
        const r = await proxy.post(CHAT, chat(`${qb}?`), {...B, ...NO_STORE});
        assert.equal(r.headers['x-cache-match'], 'semantic');
    });
    /* B's record (B's partition, B's vector and text) under A's entry, and its add event. */
    const ev0 = (await proxy.stats()).semantic_sync_events;
    await env.redis.command('COPY', vb, va, 'REPLACE');
    await env.redis.command('EVAL', "return redis.call('XADD', KEYS[1], '*', 'op', 'add', 'k', ARGV[1], " +
        "'r', redis.call('GET', KEYS[2]), 'm', '1')", 2, 'pc:2:vs', va, `${ta}:${ka}`);
    /* B's own answer goes: A's entry would be the only candidate. */
    await env.redis.command('DEL', `pc:2:e:{${tb}:${kb}}`, vb);
    await h.waitFor(async () => (await proxy.stats()).semantic_sync_events > ev0, {what: 'the forged event applied'});
    for (let i = 0; i < 3; i++) {
        const r = await proxy.post(CHAT, chat(`${qb}!`), {...B, ...NO_STORE});
        assert.equal(r.status, 200, r.text);
        assert.doesNotMatch(text(r), /launch code/, `tenant B was served tenant A's answer (${r.headers['x-cache-match']})`);
        assert.equal(r.headers['x-cache-status'], 'MISS');
    }
    assert.ok((await proxy.stats()).semantic_sync_rejected >= 1, 'counted');
});

h.test('tear down', async () => {
    if (sem)
        await sem.close();
});
