'use strict';
/*
 * A bounded vector index per instance (semantic-index-memory), through the
 * real binary and a real redis-server: a writer instance (unbounded) stores
 * questions in many partitions; an instance with a small budget loads each
 * partition from its member list in Redis on first use, stays within the
 * budget by evicting the least recently searched partitions, and finds an
 * evicted partition again after loading it anew. A restarted instance loads
 * nothing at start and serves a semantic hit on the first request of a
 * partition. Member lists are input: forged members are rejected and counted
 * (semantic_members_rejected), and never answer a question of another
 * partition. The mock embedder (tests/mock/semantic.js) makes rewordings of
 * the same words similar 1.0.
 */
const assert = require('node:assert/strict');
const h = require('./lib');
const {createSemanticMock} = require('../mock/semantic');

const env = h.environment({proxy: false});
const CHAT = '/v1/chat/completions';
const NO_STORE = {'cache-control': 'no-store'};
const BUDGET = 64 * 1024;
const PARTITIONS = 30;
const PER_PARTITION = 8;

let sem = null;
let writer = null;
let small = null;
const t = h.uniq('t').split(' ')[1]; /* a word that keeps this file's partitions apart */

function semArgs(extra = []) {
    /* semantic-max-error off: the hits here are the index's, not the error bound's to learn */
    return ['--semantic', 'yes', '--semantic-max-error', 'off', '--embedder', 'openai',
        '--embedder-url', sem.url, '--embedder-model', 'mock-bow', '--semantic-threshold', '0.9',
        ...extra];
}

const body = (p, text) => ({model: 'gpt-4o-mini', max_tokens: 4,
    messages: [{role: 'system', content: `You answer for team ${p} ${t}.`}, {role: 'user', content: text}]});
const question = (p, i) => `which report number ${i} covers topic ${p} ${t}`;
const reworded = (p, i) => `topic ${p} ${t}: which report number ${i} covers`;

function assertSemanticHit(r) {
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-cache-status'], 'HIT', 'X-Cache-Status');
    assert.equal(r.headers['x-cache-match'], 'semantic', 'X-Cache-Match');
}

function assertMiss(r) {
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-cache-status'], 'MISS', `X-Cache-Status (${r.headers['x-cache-match']})`);
}

h.test('set up: a writer instance stores questions in many partitions', {timeout: 120000}, async () => {
    sem = await createSemanticMock().listen();
    writer = await env.startProxy({args: semArgs()});
    for (let p = 0; p < PARTITIONS; p++)
        for (let i = 0; i < PER_PARTITION; i++)
            assertMiss(await writer.post(CHAT, body(p, question(p, i))));
    /* Each partition's member list lists its vectors: waited for until every member is listed
     * (a list appears with its first member, the last ones may be added after their answers). */
    const listed = async () => {
        const lists = await env.redis.keys('pc:2:pm:*');
        const sizes = await Promise.all(lists.map((k) => env.redis.command('ZCARD', k)));
        return {lists: lists.length, members: sizes.map(Number).reduce((a, b) => a + b, 0)};
    };
    let seen = null;
    const all = await h.waitFor(async () => {
        seen = await listed();
        return seen.members >= PARTITIONS * PER_PARTITION ? seen : null;
    }, {what: () => `a member per vector (${JSON.stringify(seen)})`});
    assert.deepEqual(all, {lists: PARTITIONS, members: PARTITIONS * PER_PARTITION});
});

h.test('with semantic-index-memory small, the index stays within it while many partitions are used, and an evicted partition hits again after its load', {timeout: 120000}, async () => {
    small = await env.startProxy({args: semArgs(['--semantic-index-memory', '64k'])});
    let peak = 0;
    for (let round = 0; round < 2; round++) {
        for (let p = 0; p < PARTITIONS; p++) {
            /* Its first lookup loads the partition (waiting at most redis-timeout); asked with
             * no-store, a miss while it loads stores nothing, so asking again is safe. */
            await h.eventually(async () => assertSemanticHit(await small.post(CHAT,
                body(p, reworded(p, p % PER_PARTITION)), NO_STORE)), {timeout: 10000});
            const st = await small.stats();
            peak = Math.max(peak, st.semantic_index_bytes);
            assert.ok(st.semantic_index_bytes <= BUDGET, `${st.semantic_index_bytes} bytes`);
        }
    }
    const st = await small.stats();
    assert.equal(st.semantic_index_memory, BUDGET);
    assert.ok(peak > BUDGET / 2, `the budget was used: peak ${peak}`);
    assert.ok(st.semantic_index_evictions > 0, 'partitions evicted');
    assert.ok(st.semantic_partitions_loaded < PARTITIONS, `${st.semantic_partitions_loaded} loaded`);
    /* The second round found the first round's partitions evicted and loaded them again. */
    assert.ok(st.semantic_index_loads > PARTITIONS, `${st.semantic_index_loads} loads`);
    assert.equal(st.semantic_index_load_errors, 0);
    assert.equal(st.semantic_members_rejected, 0);

    /* Partition 0 was the least recently searched: gone, and found again once loaded. */
    const before = st.semantic_index_loads;
    await h.eventually(async () => assertSemanticHit(await small.post(CHAT, body(0, reworded(0, 5)),
        NO_STORE)), {timeout: 10000});
    assert.ok((await small.stats()).semantic_index_loads > before, 'loaded again');
    const m = await small.get('/metrics');
    assert.match(m.text, /^promptcache_semantic_index_evictions_total [1-9]\d*$/m);
    assert.match(m.text, /^promptcache_semantic_index_loads_total [1-9]\d*$/m);
    const g = /^promptcache_semantic_index_bytes (\d+)$/m.exec(m.text);
    assert.ok(g && Number(g[1]) > 0 && Number(g[1]) <= BUDGET, 'the gauge in /metrics');
});

h.test('a restarted instance loads nothing at start and hits on the first request of a partition', async () => {
    await small.stop();
    small = await env.startProxy({args: semArgs(['--semantic-index-memory', '64k'])});
    await h.waitFor(async () => (await small.stats()).semantic_sync_ready === true,
        {what: 'the follower on the vector stream'});
    const st0 = await small.stats();
    assert.equal(st0.semantic_vectors, 0, 'nothing loaded at start');
    /* The first lookup of partition 7 waits for its load (redis-timeout is 1 s in the tests). */
    assertSemanticHit(await small.post(CHAT, body(7, reworded(7, 2)), NO_STORE));
    const st = await small.stats();
    assert.equal(st.semantic_index_loads, 1);
    assert.equal(st.semantic_partitions_loaded, 1);
    assert.equal(st.semantic_vectors, PER_PARTITION);
});

h.test('forged member lists are rejected and counted; a forged member answers no other partition', async () => {
    /* Two partitions of their own: P1 (system prompt "one") and P2 ("two"). */
    const sys = (name, text) => ({model: 'gpt-4o-mini', max_tokens: 4,
        messages: [{role: 'system', content: `forged ${name} ${t}`}, {role: 'user', content: text}]});
    const lists0 = new Set(await env.redis.keys('pc:2:pm:*'));
    const q1 = await writer.post(CHAT, sys('one', `how tall is mount everest ${t}`));
    assertMiss(q1);
    const l1 = await h.waitFor(async () => {
        const k = (await env.redis.keys('pc:2:pm:*')).filter((x) => !lists0.has(x));
        return k.length === 1 ? k[0] : null;
    }, {what: 'P1\'s member list'});
    assertMiss(await writer.post(CHAT, sys('two', `what colour is the sky ${t}`)));
    const l2 = await h.waitFor(async () => {
        const k = (await env.redis.keys('pc:2:pm:*')).filter((x) => !lists0.has(x) && x !== l1);
        return k.length === 1 ? k[0] : null;
    }, {what: 'P2\'s member list'});
    /* X-Cache-Key: the tenant (16 hex) then the exact key (64), q1's member in its list (the
     * list's key names the tenant). */
    const id = q1.headers['x-cache-key'];
    const member = id.slice(16);
    assert.ok(Number(await env.redis.command('ZSCORE', l1, member)) > Date.now(), 'q1 listed in P1');
    const soon = String(Date.now() + 600000);
    await env.redis.command('ZADD', l2, soon, member); /* q1's record, listed in P2 */
    await env.redis.command('ZADD', l2, soon, 'not an entry key');
    await env.redis.command('ZADD', l2, soon, `${id.slice(0, 16)}:${member}`); /* not a key */
    await env.redis.command('ZADD', l2, '1e300', 'ab'.repeat(32)); /* beyond any TTL */

    const fresh = await env.startProxy({args: semArgs(['--semantic-index-memory', '64k'])});
    try {
        /* q1's question asked in P2: P2 loads, its forged members are turned away, and q1's
         * answer (P1's) is not served here. */
        assertMiss(await fresh.post(CHAT, sys('two', `mount everest: how tall is ${t}`), NO_STORE));
        const st = await fresh.stats();
        assert.equal(st.semantic_members_rejected, 4, JSON.stringify(st));
        assert.equal(st.semantic_vectors, 1, 'only P2\'s own vector loaded');
        assert.match((await fresh.get('/metrics')).text, /^promptcache_semantic_members_rejected_total 4$/m);
        /* P2's own member still answers. */
        assertSemanticHit(await fresh.post(CHAT, sys('two', `the sky: what colour is ${t}`), NO_STORE));
    } finally {
        await fresh.stop();
    }
});

/*
 * A member list that is a key of another type (a string where the sorted set should be) is input
 * that is not a list: its partition loads empty, counted in semantic_members_rejected. The
 * loader took the WRONGTYPE reply for a lost connection: every lookup in that partition dropped
 * it, failing the loads of other partitions queued meanwhile (their first lookups missed) and
 * reading every partition in memory again.
 */
h.test('a member list of another type is rejected; the loads of other partitions go on', async () => {
    const sys = (text) => ({model: 'gpt-4o-mini', max_tokens: 4,
        messages: [{role: 'system', content: `wrong type ${t}`}, {role: 'user', content: text}]});
    const lists0 = new Set(await env.redis.keys('pc:2:pm:*'));
    assertMiss(await writer.post(CHAT, sys(`which river is the longest ${t}`)));
    const list = await h.waitFor(async () => {
        const k = (await env.redis.keys('pc:2:pm:*')).filter((x) => !lists0.has(x));
        return k.length === 1 ? k[0] : null;
    }, {what: 'the member list'});
    await env.redis.command('DEL', list);
    await env.redis.command('SET', list, 'not a sorted set');

    const fresh = await env.startProxy({args: semArgs()});
    try {
        await h.waitFor(async () => (await fresh.stats()).semantic_sync_ready === true,
            {what: 'the follower on the vector stream'});
        /* Each first lookup of a partition, right after a lookup in the one of the wrong type,
         * waits for its load and hits. */
        for (let p = 10; p < 16; p++) {
            assertMiss(await fresh.post(CHAT, sys(`the longest river: which is ${t}`), NO_STORE));
            assertSemanticHit(await fresh.post(CHAT, body(p, reworded(p, 1)), NO_STORE));
        }
        const st = await fresh.stats();
        assert.equal(st.semantic_index_load_errors, 0, JSON.stringify(st));
        assert.equal(st.semantic_members_rejected, 1, 'the list of the wrong type, loaded once');
        assert.doesNotMatch(fresh.proc.output, /the loader reconnected/);
    } finally {
        await fresh.stop();
    }
});

h.test('a tenant flush and a full flush delete the member lists with the vectors', async () => {
    const admin = await env.startProxy({args: semArgs(['--admin-token', 'secret'])});
    try {
        assert.ok((await env.redis.keys('pc:2:pm:*')).length > 0);
        const r = await admin.request({method: 'DELETE', path: '/admin/cache',
            headers: {Authorization: 'Bearer secret'}});
        assert.equal(r.status, 200, r.text);
        assert.deepEqual(await env.redis.keys('pc:2:pm:*'), [], 'no member list left');
        assert.deepEqual(await env.redis.keys('pc:2:v:*'), []);
    } finally {
        await admin.stop();
    }
});

h.test('tear down', async () => {
    await small.stop();
    await writer.stop();
    await sem.close();
});
