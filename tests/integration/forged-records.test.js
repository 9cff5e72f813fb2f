'use strict';
/*
 * Forged prefix records in a real redis-server (issue 20.5): what another
 * writer puts in the prefix stream (pc:2:px) or a replica's set
 * (pc:2:pz:{replica}) is input. A record whose time would overflow its
 * stamps (UBSan aborted the proxy), one whose link weighs 2^32 - 1 tokens
 * (it evicted the replica's whole prefix index), one from the far future,
 * and malformed ones are rejected and counted in prefix_records_rejected,
 * while the proxy goes on serving and routing a conversation to the replica
 * that holds its prefix; an instance that starts later and restores from
 * the sets rejects the forged members the same way.
 */
const assert = require('node:assert/strict');
const h = require('./lib');
const {rawCommand, link, record, randomHash} = require('./lib/prefix-records');
const {startVllmMock} = require('../mock/vllm');

const env = h.environment({proxy: false});
const CHAT = '/v1/chat/completions';
const NO_STORE = {'cache-control': 'no-store'};
const STREAM = 'pc:2:px';

/* A conversation of n user turns: a long first question, short turns after (as prefix.test.js). */
function conversation(topic, n) {
    const messages = [{role: 'user', content: `${topic}: ${'context '.repeat(600)}`}];
    for (let i = 1; i < n; i++)
        messages.push({role: 'assistant', content: `answer ${i}`}, {role: 'user', content: `${topic} follow-up ${i}`});
    return {model: 'mock-vllm', messages, max_tokens: 4};
}

function replicaOf(st, name) {
    const rep = st.replicas.find((x) => x.name === name);
    assert.ok(rep, `replica ${name} in ${JSON.stringify(st.replicas)}`);
    return rep;
}

h.test('forged prefix records are rejected and counted; routing by prefix goes on', async () => {
    const reps = [];
    try {
        for (let i = 0; i < 2; i++)
            reps.push(await startVllmMock({name: `v${i}`, usPerToken: 0, usPerOutputToken: 0}));
        const start = () => env.startProxy({upstream: reps.map((r) => r.url), workers: 2,
            args: ['--upstream-type', 'vllm']});
        const a = await start();
        const topic = h.uniq('forged');
        const r1 = await a.post(CHAT, conversation(topic, 1), NO_STORE);
        assert.equal(r1.status, 200, r1.text);
        const home = r1.headers['x-upstream'];
        const held = replicaOf(await a.stats(), home).index_tokens;
        assert.ok(held > 1000, `index_tokens ${held}`);

        /* A sound record of another instance first, until a's reader (which follows the stream
         * from where it ended when it connected) applies one: all of them name the same link. */
        const port = env.redis.port;
        const soundLink = link(randomHash(), 50);
        await h.waitFor(async () => {
            if ((await a.stats()).prefix_sync_applied > 0)
                return true;
            await rawCommand(port, 'XADD', STREAM, '*', 'd', record(Date.now(), home, [soundLink]));
            return false;
        }, {what: 'a sound record applied'});
        assert.equal(replicaOf(await a.stats(), home).index_tokens, held + 50);

        const forged = [
            record(2n ** 63n - 1n, home, [link(randomHash(), 100)]), /* ms * 4096 overflows */
            record(-5, home, [link(randomHash(), 100)]), /* a negative time */
            record(Date.now() + 86400000, home, [link(randomHash(), 100)]), /* a day ahead */
            record(Date.now(), home, [link(randomHash(), 0xffffffff)]), /* would evict everything */
            record(Date.now(), home, []), /* no link */
            Buffer.concat([record(Date.now(), home, [link(randomHash(), 100)]), Buffer.from('xyz')]),
        ];
        for (const d of forged)
            await rawCommand(port, 'XADD', STREAM, '*', 'd', d);
        await rawCommand(port, 'XADD', STREAM, '*', 'd', record(Date.now(), home, []), 'e', 'x');
        await h.waitFor(async () => (await a.stats()).prefix_records_rejected === forged.length + 1,
            {what: 'every forged record rejected', timeout: 10000});

        /* No forged link held (each weighs 100 tokens), nothing evicted. */
        let st = await a.stats();
        assert.equal(replicaOf(st, home).index_tokens, held + 50, 'the index kept what it held');
        /* Serving and routing by prefix go on: the next turns land where the prefix is. */
        for (let turn = 2; turn <= 3; turn++) {
            const r = await a.post(CHAT, conversation(topic, turn), NO_STORE);
            assert.equal(r.status, 200, r.text);
            assert.equal(r.headers['x-upstream'], home, `turn ${turn}`);
            assert.ok(r.json.usage.prompt_tokens_details.cached_tokens > 1000, JSON.stringify(r.json.usage));
        }
        st = await a.stats();
        assert.ok(replicaOf(st, home).routed_by_prefix >= 2, JSON.stringify(replicaOf(st, home)));

        /* Forged members of the replica's set: an instance that starts now restores past them. */
        const set = `pc:2:pz:{${home}}`;
        const sound = await rawCommand(port, 'ZCARD', set);
        assert.ok(sound > 0, 'a wrote its links to the set');
        await rawCommand(port, 'ZADD', set, '+inf', link(randomHash(), 100),
            String(2 ** 52), link(randomHash(), 0xffffffff), '-4096', link(randomHash(), 100),
            '1', Buffer.from('short'));
        const b = await start();
        await h.waitFor(async () => (await b.stats()).prefix_records_rejected === 4,
            {what: 'b rejecting the forged members'});
        await h.waitFor(async () => replicaOf(await b.stats(), home).index_tokens >= held,
            {what: 'b restoring the sound members'});
        const r4 = await b.post(CHAT, conversation(topic, 4), NO_STORE);
        assert.equal(r4.status, 200, r4.text);
        assert.equal(r4.headers['x-upstream'], home);
        const m = await b.get('/metrics');
        assert.match(m.text, /^promptcache_prefix_records_rejected_total 4$/m);
        assert.ok(a.alive && b.alive);
        await Promise.all([a.stop(), b.stop()]);
    } finally {
        await Promise.all(reps.map((r) => r.close()));
    }
});

h.test('a stream key of another type is set aside: the other streams (the L1) are followed, and it is again once deleted', async () => {
    /*
     * One XREAD follows every stream of a server. The prefix stream's key replaced by a string
     * made that XREAD (and XINFO) fail with WRONGTYPE, so the follower stayed down: the L1 was
     * off and the vector index followed nobody until someone deleted the key. Now only the
     * prefix handler is down; deleted, the key is a stream again within the recheck (10 s).
     */
    const reps = [];
    const port = env.redis.port;
    try {
        for (let i = 0; i < 2; i++)
            reps.push(await startVllmMock({name: `v${i}`, usPerToken: 0, usPerOutputToken: 0}));
        await rawCommand(port, 'DEL', STREAM);
        await rawCommand(port, 'SET', STREAM, 'not a stream');
        const a = await env.startProxy({upstream: reps.map((r) => r.url), workers: 1,
            args: ['--upstream-type', 'vllm']});
        await h.waitFor(async () => (await a.stats()).l1_live === true,
            {what: 'the L1 live beside a prefix stream of another type', timeout: 15000});
        /* said before the L1 went live; the log pipe may be read after /stats answered */
        await h.waitFor(() => /pc:2:px is a key of another type/.test(a.proc.output),
            {what: 'the prefix stream set aside in the log'});
        /* The L1 works: a repeat is answered from it (l1_hits, counted once the answer went out). */
        const q = conversation(h.uniq('aside'), 1);
        const first = await a.post(CHAT, q);
        assert.equal(first.status, 200, first.text);
        const home = first.headers['x-upstream'];
        await h.eventually(async () => {
            assert.equal((await a.post(CHAT, q, NO_STORE)).headers['x-cache-status'], 'HIT');
            assert.ok((await a.stats()).l1_hits > 0, 'an L1 hit');
        });
        await rawCommand(port, 'DEL', STREAM);
        await h.waitFor(async () => /pc:2:px is a stream again/.test(a.proc.output),
            {what: 'the prefix stream followed again', timeout: 30000});
        /* Followed from its end: a sound record of another instance is applied. */
        await h.waitFor(async () => {
            if ((await a.stats()).prefix_sync_applied > 0)
                return true;
            await rawCommand(port, 'XADD', STREAM, '*', 'd', record(Date.now(), home, [link(randomHash(), 50)]));
            return false;
        }, {what: 'a record of the prefix stream applied'});
        assert.ok(a.alive);
        await a.stop();
    } finally {
        await rawCommand(port, 'DEL', STREAM); /* a stream again for the next tests, failed or not */
        await Promise.all(reps.map((r) => r.close()));
    }
});

h.test('records of links that weigh no tokens do not grow the prefix index past its capacity', async () => {
    /*
     * A link weighing 0 tokens added nothing to its replica's held tokens, so eviction (which
     * runs while they exceed prefix-capacity) never came: records of 0-token links (forged, or
     * of empty messages) grew the index by one node each, without bound. A link now weighs at
     * least one token in the index, so a replica holds at most prefix-capacity links.
     */
    const reps = [];
    const port = env.redis.port;
    try {
        for (let i = 0; i < 2; i++)
            reps.push(await startVllmMock({name: `v${i}`, usPerToken: 0, usPerOutputToken: 0}));
        const a = await env.startProxy({upstream: reps.map((r) => r.url), workers: 1,
            args: ['--upstream-type', 'vllm', '--prefix-capacity', '1000']});
        const home = (await a.stats()).replicas[0].name;
        /* One sound record once the follower reads the stream (one sent before is never read):
         * with one sent at each poll until one was applied, those applied late counted as
         * forged ones, and the check below ran while the last forged ones were being applied,
         * their links not yet evicted (1003 of 1000, once under load). */
        await h.waitFor(async () => (await a.stats()).stream_following >= 1, {what: 'the follower reading'});
        await rawCommand(port, 'XADD', STREAM, '*', 'd', record(Date.now(), home, [link(randomHash(), 1)]));
        await h.waitFor(async () => (await a.stats()).prefix_sync_applied === 1, {what: 'a sound record applied'});
        const applied = 1;
        const records = 40, perRecord = 500;
        for (let r = 0; r < records; r++) {
            const links = [];
            for (let i = 0; i < perRecord; i++)
                links.push(link(randomHash(), 0));
            await rawCommand(port, 'XADD', STREAM, '*', 'd', record(Date.now(), home, links));
        }
        await h.waitFor(async () => (await a.stats()).prefix_sync_applied === applied + records,
            {what: 'every record applied', timeout: 15000});
        const st = await a.stats();
        const entries = Number((await a.get('/metrics')).text.match(/^promptcache_prefix_index_entries (\d+)$/m)[1]);
        assert.ok(entries <= 1000, `prefix_index_entries ${entries} over prefix-capacity 1000`);
        assert.ok(replicaOf(st, home).index_tokens <= 1000, JSON.stringify(replicaOf(st, home)));
        assert.ok(a.alive);
        await a.stop();
    } finally {
        await Promise.all(reps.map((r) => r.close()));
    }
});

h.test('a replica\'s set of another type: the read and the writes refused say so in the log', async () => {
    /*
     * Redis refusing the restore's ZRANGE or the writer's ZADDs (a key of another type: WRONGTYPE)
     * only made prefix_sync_errors grow, with nothing in the log to say which key or why.
     */
    const reps = [];
    const port = env.redis.port;
    try {
        for (let i = 0; i < 2; i++)
            reps.push(await startVllmMock({name: `v${i}`, usPerToken: 0, usPerOutputToken: 0}));
        const name = `127.0.0.1:${reps[0].port}`;
        await rawCommand(port, 'SET', `pc:2:pz:{${name}}`, 'not a set');
        const a = await env.startProxy({upstream: reps.map((r) => r.url), workers: 1,
            args: ['--upstream-type', 'vllm', '--routing', 'round-robin']});
        for (let i = 0; i < 2; i++) {
            const r = await a.post(CHAT, conversation(h.uniq('wrongtype'), 1), NO_STORE);
            assert.equal(r.status, 200, r.text);
        }
        const said = (what) => new RegExp(`refused the ${what} of pc:2:pz:\\{${name.replace(/\./g, '\\.')}\\}: WRONGTYPE`);
        await h.waitFor(() => said('read').test(a.proc.output) && said('write').test(a.proc.output),
            {what: 'the refused read and write in the log'});
        assert.ok((await a.stats()).prefix_sync_errors >= 2);
        assert.ok(a.alive);
        await a.stop();
        await rawCommand(port, 'DEL', `pc:2:pz:{${name}}`);
    } finally {
        await Promise.all(reps.map((r) => r.close()));
    }
});

h.test('with Redis away, the records waiting to be shared are bounded by their links, not only their count', {timeout: 120000}, async () => {
    /*
     * The writer keeps records while Redis is away (until it is back), up to 4096 of them, each
     * up to 4096 links of 12 bytes: some 200 MB of prompts of many links. Now the queue also
     * holds at most 2^18 links (3 MB); a record past that is dropped and counted in
     * prefix_sync_dropped (and prefix_sync_errors, as one past the count was).
     */
    const reps = [];
    try {
        reps.push(await startVllmMock({name: 'v0', usPerToken: 0, usPerOutputToken: 0}));
        const a = await env.startProxy({upstream: reps.map((r) => r.url), workers: 2,
            args: ['--upstream-type', 'vllm', '--prefix-capacity', '100000000']});
        await env.redis.stop();
        const before = (await a.stats()).prefix_sync_dropped || 0;
        /* 4096 short messages: a chain of 4096 links. */
        const many = (k) => {
            const messages = [];
            for (let i = 0; i < 4096; i++)
                messages.push({role: i % 2 ? 'assistant' : 'user', content: `${k}.${i}`});
            return {model: 'mock-vllm', messages, max_tokens: 1};
        };
        const requests = 80;
        for (let k = 0; k < requests; k++) {
            const r = await a.post(CHAT, many(h.uniq('many')), NO_STORE);
            assert.equal(r.status, 200, r.text);
        }
        const st = await a.stats();
        const dropped = (st.prefix_sync_dropped || 0) - before;
        /* 64 records fill 2^18 links; the writer holds the few that came first besides. */
        assert.ok(dropped >= requests - 64 - 8, `${dropped} records dropped of ${requests}`);
        assert.ok(st.prefix_sync_errors >= dropped, 'dropped records are errors too');
        assert.ok(a.alive);
        await a.stop();
    } finally {
        await env.redis.restart();
        await Promise.all(reps.map((r) => r.close()));
    }
});
