'use strict';
/*
 * Redis changed behind the proxy's back: FLUSHALL / FLUSHDB, a key deleted by
 * hand, an entry overwritten with something else. Whatever the proxy holds in
 * memory (its L1) must follow: once Redis no longer has an answer, the next
 * identical request goes upstream; nothing that is not a stored answer is
 * ever served. Each file starts its own fresh redis-server, so the pc:2:vs
 * stream does not exist when the proxy starts.
 */
const assert = require('node:assert/strict');
const h = require('./lib');
const {createSemanticMock} = require('../mock/semantic');

const env = h.environment();
const CHAT = '/v1/chat/completions';

async function waitLive(proxy) {
    await h.waitFor(async () => (await proxy.stats()).l1_live === true, {what: 'l1_live', timeout: 15000});
}

/* Ask for body (stored, or a hit) and wait until a repeat is answered from the L1 (l1_hits moves). */
async function storedInL1(proxy, body) {
    const first = await proxy.post(CHAT, body);
    assert.equal(first.status, 200, first.text);
    await h.waitFor(async () => {
        const hits = (await proxy.stats()).l1_hits;
        const r = await proxy.post(CHAT, body);
        return r.headers['x-cache-status'] === 'HIT' && (await proxy.stats()).l1_hits === hits + 1;
    }, {what: 'the answer in the L1'});
    return first;
}

/*
 * Repeat body until a repeat goes upstream (the mock counts one more call);
 * every answer before that must be the stored one. Returns the upstream answer.
 */
async function goesUpstream(proxy, body, stored) {
    let r = null;
    await h.waitFor(async () => {
        const calls = env.mock.callCount(CHAT);
        r = await proxy.post(CHAT, body);
        assert.equal(r.status, 200, r.text);
        if (env.mock.callCount(CHAT) === calls + 1)
            return true;
        assert.deepEqual(r.json, stored.json, 'a cached answer is the stored one');
        return false;
    }, {what: 'an identical request to go upstream', timeout: 15000});
    /* MISS, or BYPASS when the key holds another type (Redis refuses the GET) */
    assert.ok(['MISS', 'BYPASS'].includes(r.headers['x-cache-status']), r.headers['x-cache-status']);
    h.assertFromUpstream(r, env.mock, r.headers['x-cache-status']);
    return r;
}

/*
 * A proxy started while pc:2:vs is absent, whose L1 holds answers it read from Redis (it wrote
 * nothing to the stream itself, so it has read no entry of it): FLUSHALL is told by the
 * stream's disappearing alone, so the stream must be there to disappear.
 */
h.test('FLUSHALL after a start without the pc:2:vs stream: the next request goes upstream', async () => {
    await waitLive(env.proxy);
    const body = h.chatBody(h.uniq('flushall'));
    const first = await env.proxy.post(CHAT, body);
    h.assertFromUpstream(first, env.mock);
    await env.redis.command('DEL', 'pc:2:vs');
    const p = await env.startProxy();
    try {
        await waitLive(p);
        const stored = await storedInL1(p, body);
        assert.deepEqual(stored.json, first.json);
        await env.redis.command('FLUSHALL');
        await goesUpstream(p, body, stored);
    } finally {
        await p.stop();
    }
});

/*
 * FLUSHALL, and at once a few stores (here their events, in the same MULTI: no look of the
 * follower between them). A follower that noted pc:2:vs empty and read nothing from it (its
 * L1 holds answers it read) had counted no entry: the new stream's entries-added was at or
 * above that count, its entries were read as the old one's, and the L1 kept serving the
 * answer Redis had dropped until its TTL.
 */
h.test('FLUSHALL and stores at once, after a start on an empty pc:2:vs: the next request goes upstream', async () => {
    await waitLive(env.proxy);
    const body = h.chatBody(h.uniq('refilled'));
    const first = await env.proxy.post(CHAT, body);
    h.assertFromUpstream(first, env.mock);
    /* the event of another answer's store: one about body would drop it from the L1 */
    h.assertFromUpstream(await env.proxy.post(CHAT, h.chatBody(h.uniq('other'))), env.mock);
    const [[, fields]] = await env.redis.command('XREVRANGE', 'pc:2:vs', '+', '-', 'COUNT', '1');
    /* the schema again (the FLUSHALL above took it): a follower makes no stream without it */
    const m = await h.runCli(['migrate', '--redis', env.redis.url]);
    assert.equal(m.code, 0, m.output);
    await env.redis.command('DEL', 'pc:2:vs');
    const p = await env.startProxy();
    try {
        await waitLive(p);
        const stored = await storedInL1(p, body);
        const clears = (await p.stats()).l1_clears;
        const c = await env.redis.client();
        try {
            const sent = [c.command('MULTI'), c.command('FLUSHALL')];
            for (let i = 0; i < 3; i++)
                sent.push(c.command('XADD', 'pc:2:vs', '*', ...fields));
            sent.push(c.command('EXEC'));
            const replies = await Promise.all(sent);
            assert.equal(replies.at(-1).length, 4, 'FLUSHALL and the XADDs ran');
        } finally {
            c.close();
        }
        /* the follower looks every second: once it has, its L1 holds nothing from before */
        await h.waitFor(async () => (await p.stats()).l1_clears > clears,
            {what: 'the follower to tell the flush and clear the L1', timeout: 5000});
        await goesUpstream(p, body, stored);
    } finally {
        await p.stop();
    }
});

h.test('FLUSHALL and FLUSHDB after answers stored through the proxy: the next request goes upstream', async () => {
    for (const flush of ['FLUSHALL', 'FLUSHDB']) {
        await waitLive(env.proxy);
        const body = h.chatBody(h.uniq(flush));
        const stored = await storedInL1(env.proxy, body);
        await env.redis.command(flush);
        await goesUpstream(env.proxy, body, stored);
    }
});

/* Store a fresh question through p; its entry's key (the one pc:2:e: key that is new). */
async function storeWithKey(p, what) {
    const before = new Set(await env.redis.keys('pc:2:e:*'));
    const body = h.chatBody(h.uniq(what));
    const stored = await storedInL1(p, body);
    const added = (await env.redis.keys('pc:2:e:*')).filter((k) => !before.has(k));
    assert.equal(added.length, 1, `one new entry key (${added})`);
    return {body, stored, key: added[0]};
}

/*
 * An entry changed by hand, on a proxy with an L1 and one without: the next identical
 * request goes upstream, and no answer before that is anything but the stored one.
 */
async function changedByHand(what, change) {
    const direct = await env.startProxy({args: ['--l1-size', '0']});
    try {
        for (const p of [env.proxy, direct]) {
            await waitLive(env.proxy);
            const {body, stored, key} = await (p === direct
                ? (async () => {
                    const before = new Set(await env.redis.keys('pc:2:e:*'));
                    const b = h.chatBody(h.uniq(what));
                    const s = await p.post(CHAT, b);
                    h.assertFromUpstream(s, env.mock);
                    h.assertHit(await p.post(CHAT, b));
                    const added = (await env.redis.keys('pc:2:e:*')).filter((k) => !before.has(k));
                    return {body: b, stored: s, key: added[0]};
                })()
                : storeWithKey(p, what));
            await change(key);
            await goesUpstream(p, body, stored);
        }
    } finally {
        await direct.stop();
    }
}

h.test('an entry deleted by hand: the next identical request goes upstream', async () => {
    await changedByHand('deleted', (key) => env.redis.command('DEL', key));
});

h.test('an entry overwritten with a hash: the next identical request goes upstream', async () => {
    await changedByHand('hash', async (key) => {
        await env.redis.command('DEL', key);
        await env.redis.command('HSET', key, 'status', '200', 'body', 'not an answer');
    });
});

h.test('an entry overwritten with a value of another format: the next identical request goes upstream', async () => {
    await changedByHand('format', (key) => env.redis.command('SET', key, 'PCE\x09not an entry of any format'));
});

/*
 * After FLUSHALL the schema key pc:schema is gone too. The stores read it only when they
 * connect, so they stayed READY and never wrote it back; an instance's vector loader that
 * connects again waits for it before it loads a partition, and an instance that starts with
 * redis-auto-migrate off stays blocked: semantic lookups in partitions not in memory missed
 * (the cache bypassed, for the blocked one) until some store reconnected with auto-migrate on,
 * maybe never. A READY store now puts the version back (see doc/redis.md).
 */
const NO_STORE = {'cache-control': 'no-store'};

/* A question of its own partition (its system prompt), and a rewording with the same words:
 * the mock embeds a bag of words in 64 buckets, so a word more or less can miss. */
function semanticPair(what) {
    const tag = h.uniq('t').split(' ')[1];
    const body = (text) => {
        const b = h.chatBody(text);
        b.messages[0].content = `You are terse (${what} ${tag}).`;
        return b;
    };
    return {question: body(`how tall is mount everest ${tag}`), reworded: body(`mount everest: how tall is ${tag}`)};
}

async function withSemantic(fn) {
    const sem = await createSemanticMock().listen();
    const args = (extra = []) => ['--semantic', 'yes', '--semantic-max-error', 'off', '--embedder', 'openai',
        '--embedder-url', sem.url, '--embedder-model', 'mock-bow', '--semantic-threshold', '0.9', ...extra];
    try {
        await fn(args);
    } finally {
        await sem.close();
    }
}

/* With a remote embedder an instance's vector index and its loader start with its first
 * embedding: one question that stores nothing, then wait until it follows the stream. */
async function warmUp(p) {
    assert.equal((await p.post(CHAT, h.chatBody(h.uniq('warm up')), NO_STORE)).status, 200);
    await h.waitFor(async () => (await p.stats()).semantic_sync_ready === true, {what: 'the vector reader in step'});
}

/* Ask p the rewording (storing nothing) until it is a semantic hit of the stored answer. */
async function semanticHit(p, reworded, stored) {
    let last = null;
    await h.waitFor(async () => {
        last = await p.post(CHAT, reworded, NO_STORE);
        assert.equal(last.status, 200, last.text);
        return last.headers['x-cache-match'] === 'semantic';
    }, {timeout: 20000, what: () => `a semantic hit (the last answer: ${last && last.headers['x-cache-status']})`});
    assert.equal(last.headers['x-cache-status'], 'HIT');
    assert.deepEqual(last.json.choices, stored.json.choices, 'the answer stored after the flush');
}

/* The ids of Redis' clients now, but the one asking. */
async function clientIds() {
    const list = String(await env.redis.command('CLIENT', 'LIST'));
    return new Set(list.split('\n').filter((l) => l && !/ cmd=client\|list /.test(l))
        .map((l) => /^id=(\d+) /.exec(l)[1]));
}

/* pc:schema at this build's version (the tests above flushed it away); the version. */
async function migrated() {
    const m = await h.runCli(['migrate', '--redis', env.redis.url]);
    assert.equal(m.code, 0, m.output);
    const v = String(h.latestSchemaVersion());
    assert.equal(await env.redis.command('GET', 'pc:schema'), v);
    return v;
}

async function schemaBack(schema) {
    await h.waitFor(async () => (await env.redis.command('GET', 'pc:schema')) === schema,
        {what: `pc:schema back at version ${schema}`});
}

h.test('FLUSHALL, then an instance\'s vector loader connects again: a question stored after it is a semantic hit there', async () => {
    await withSemantic(async (args) => {
        const schema = await migrated();
        const A = await env.startProxy({args: args()});
        const before = await clientIds();
        const B = await env.startProxy({args: args()});
        try {
            await warmUp(A);
            /* B's stores connect at its start; its stream follower and vector loader with its
             * first embedding: the connections that come then are those two (a writes'
             * connection among them would only connect again, with no schema check). */
            const stores = await clientIds();
            await warmUp(B);
            const late = [...await clientIds()].filter((id) => !before.has(id) && !stores.has(id));
            assert.ok(late.length >= 1, 'B\'s follower and loader connections');

            await env.redis.command('FLUSHALL');
            const {question, reworded} = semanticPair('loader');
            const first = await A.post(CHAT, question);
            h.assertFromUpstream(first, env.mock);
            /* B's stores stay connected (a store that connects runs the migrations itself). */
            for (const id of late)
                await env.redis.command('CLIENT', 'KILL', 'ID', id);
            await semanticHit(B, reworded, first);
            await schemaBack(schema);
        } finally {
            await B.stop();
            await A.stop();
        }
    });
});

h.test('FLUSHALL, then an instance starts with redis-auto-migrate off: its cache works and finds what was stored after it', async () => {
    await withSemantic(async (args) => {
        const schema = await migrated();
        const A = await env.startProxy({args: args()});
        try {
            await warmUp(A);
            await env.redis.command('FLUSHALL');
            const {question, reworded} = semanticPair('starts');
            const first = await A.post(CHAT, question);
            h.assertFromUpstream(first, env.mock);
            /* ready (readyz 200) only with pc:schema at this build's version: it migrates nothing */
            const C = await env.startProxy({args: args(['--redis-auto-migrate', 'no'])});
            try {
                await schemaBack(schema);
                await warmUp(C);
                await semanticHit(C, reworded, first);
            } finally {
                await C.stop();
            }
        } finally {
            await A.stop();
        }
    });
});
