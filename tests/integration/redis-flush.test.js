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
