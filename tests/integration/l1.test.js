'use strict';
/*
 * The L1: hot exact answers kept in the proxy's memory in front of Redis.
 * A repeat of a stored answer is a HIT without a Redis GET (Redis's own
 * command counters prove it), counted in l1_hits; it keeps the Redis key's
 * TTL, honours max-age, is dropped by a flush made through any instance
 * (the pc:2:vs stream) and by a refresh of its key, and while Redis is down
 * the L1 is off.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const ADMIN_TOKEN = 'admin-token-for-l1';
const env = h.environment({proxyArgs: ['--admin-token', ADMIN_TOKEN]});

const CHAT = '/v1/chat/completions';

/* GET calls Redis has served so far (INFO commandstats). */
async function redisGets() {
    const info = String(await env.redis.command('INFO', 'commandstats'));
    const m = /cmdstat_get:calls=(\d+)/.exec(info);
    return m ? Number(m[1]) : 0;
}

async function stats(proxy) {
    return proxy.stats();
}

async function waitLive(proxy, live = true) {
    await h.waitFor(async () => (await stats(proxy)).l1_live === live,
        {what: `l1_live ${live}`, timeout: 15000});
}

function flush(proxy, tenant) {
    const path = tenant === undefined ? '/admin/cache' : `/admin/cache?tenant=${tenant}`;
    return h.request(proxy.url, {method: 'DELETE', path, headers: {authorization: `Bearer ${ADMIN_TOKEN}`}});
}

/* Whether a no-store repeat of body through proxy is answered from its L1 (l1_hits + 1). */
async function fromL1(proxy, body, headers = {}) {
    const hits = (await stats(proxy)).l1_hits;
    const r = await proxy.post(CHAT, body, {...headers, 'cache-control': 'no-store'});
    return r.headers['x-cache-status'] === 'HIT' && (await stats(proxy)).l1_hits === hits + 1;
}

/*
 * Store an answer through proxy and wait until this answer is in that proxy's
 * L1: a repeat is answered from it. (A count of inserts is moved by any answer
 * on its way to the L1, such as an earlier test's last one.) A repeat that
 * reaches Redis first puts the entry into the L1 as well; the first test shows
 * that the store alone does.
 */
async function stored(proxy, body, headers) {
    const r = await proxy.post(CHAT, body, headers);
    assert.equal(r.status, 200, r.text);
    await h.waitFor(() => fromL1(proxy, body, headers), {what: 'the answer in the L1'});
    return r;
}

h.test('a repeated request is answered from the L1 without a Redis GET', async () => {
    await waitLive(env.proxy);
    const body = h.chatBody(h.uniq('l1 basic'));
    /* The proxy's first answer: nothing else was ever on its way to its L1, so the first
     * insert is this answer's, put there by the store (no repeat has read Redis). */
    const first = await env.proxy.post(CHAT, body);
    h.assertFromUpstream(first, env.mock);
    await h.waitFor(async () => (await stats(env.proxy)).l1_inserts === 1, {what: 'the answer in the L1'});
    const calls = env.mock.callCount(CHAT);
    const s0 = await stats(env.proxy);
    const gets = await redisGets();
    for (let i = 0; i < 3; i++) {
        const r = await env.proxy.post(CHAT, body);
        h.assertHit(r);
        assert.deepEqual(r.json, first.json);
    }
    assert.equal(await redisGets(), gets, 'no GET reached Redis');
    assert.equal(env.mock.callCount(CHAT), calls);
    const s1 = await stats(env.proxy);
    assert.equal(s1.l1_hits - s0.l1_hits, 3);
    assert.equal(s1.cache_hits_exact - s0.cache_hits_exact, 3, 'L1 hits are exact hits');
    const metrics = (await env.proxy.get('/metrics')).text;
    assert.match(metrics, /^promptcache_l1_hits_total \d+/m);
});

h.test('an answer stored by another instance is read from Redis once, then from the L1', async () => {
    const other = await env.startProxy({args: ['--admin-token', ADMIN_TOKEN]});
    await waitLive(other);
    await waitLive(env.proxy);
    const body = h.chatBody(h.uniq('l1 other instance'));
    const seen = (await stats(env.proxy)).l1_events;
    await stored(other, body);
    /* Its write event reached this instance (a read sent before would not be kept). */
    await h.waitFor(async () => (await stats(env.proxy)).l1_events > seen, {what: 'the write event read'});
    const s0 = await stats(env.proxy);
    const gets = await redisGets();
    h.assertHit(await env.proxy.post(CHAT, body));
    assert.equal(await redisGets(), gets + 1, 'the first hit read Redis');
    /* A count, but an exact one here: this proxy's only other insert was the first test's,
     * counted before s0 (its other requests were L1 hits); a repeat asked meanwhile would
     * read Redis again. */
    await h.waitFor(async () => (await stats(env.proxy)).l1_inserts > s0.l1_inserts,
        {what: 'the entry read from Redis in the L1'});
    h.assertHit(await env.proxy.post(CHAT, body));
    assert.equal(await redisGets(), gets + 1, 'the second hit did not');
    assert.equal((await stats(env.proxy)).l1_hits - s0.l1_hits, 1);

    /* A flush through the other instance reaches this one's L1 (Redis has no entry any more:
     * only this L1 could still answer, and no-store keeps the misses from storing one). */
    const events = (await stats(env.proxy)).l1_events;
    const r = await flush(other);
    assert.ok(r.status >= 200 && r.status < 300, `flush: ${r.status} ${r.text}`);
    await h.waitFor(async () => (await env.proxy.post(CHAT, body, {'cache-control': 'no-store'}))
        .headers['x-cache-status'] === 'MISS', {what: 'the flush applied to the first instance\'s L1'});
    /* by the stream event: its reader counts it once the whole L1 is cleared, a moment after
     * the entry's shard (which the MISS saw) */
    await h.waitFor(async () => (await stats(env.proxy)).l1_events > events, {what: 'the flush event counted'});
    const calls = env.mock.callCount(CHAT);
    h.assertFromUpstream(await env.proxy.post(CHAT, body), env.mock);
    assert.equal(env.mock.callCount(CHAT), calls + 1, 'flushed: the upstream answered');
    await other.stop(5000);
});

/* Read body through proxy until the answer it gives is in its L1 (a hit counted in l1_hits). */
async function inL1(proxy, body) {
    return h.waitFor(async () => {
        const s0 = await stats(proxy);
        const r = await proxy.post(CHAT, body);
        h.assertHit(r);
        return (await stats(proxy)).l1_hits > s0.l1_hits ? r : null;
    }, {what: 'a hit from the L1'});
}

h.test('a refresh through one instance replaces the answer in every instance\'s L1', async () => {
    const other = await env.startProxy({args: ['--admin-token', ADMIN_TOKEN]});
    await waitLive(other);
    await waitLive(env.proxy);
    const body = h.chatBody(h.uniq('l1 refresh'));
    const seen = (await stats(other)).l1_events;
    const first = await stored(env.proxy, body);
    /*
     * B reads the answer into its L1 only after A's write event has reached it: a copy read
     * before would be dropped by that event (B cannot tell its read from an older one), maybe
     * after inL1 saw it hit, and B would answer the refreshed answer below whether or not the
     * refresh's own event reached it.
     */
    await h.waitFor(async () => (await stats(other)).l1_events > seen, {what: 'the write event read by B'});
    const old = await inL1(other, body);
    assert.equal(old.json.id, first.json.id);

    /* A asks the upstream again (no-cache) and stores the new answer over the old one. */
    const calls = env.mock.callCount(CHAT);
    const fresh = await env.proxy.post(CHAT, body, {'cache-control': 'no-cache'});
    assert.equal(fresh.status, 200, fresh.text);
    assert.equal(fresh.headers['x-cache-status'], 'REFRESH');
    assert.equal(env.mock.callCount(CHAT), calls + 1, 'the upstream answered the refresh');
    assert.notEqual(fresh.json.id, first.json.id, 'a new answer');

    /* B drops the old answer from its L1 and answers the new one, from Redis, then its L1. */
    await h.waitFor(async () => {
        const r = await other.post(CHAT, body);
        h.assertHit(r);
        return r.json.id === fresh.json.id;
    }, {what: () => 'the second instance to answer the refreshed answer'});
    assert.equal((await inL1(other, body)).json.id, fresh.json.id);
    assert.equal((await inL1(env.proxy, body)).json.id, fresh.json.id, 'and so does the first');
    assert.equal(env.mock.callCount(CHAT), calls + 1);

    /* A refresh with a shorter TTL: B's copy must not outlive the new Redis key either. */
    const short = await env.proxy.post(CHAT, body, {'cache-control': 'no-cache', 'x-cache-ttl': '2'});
    assert.equal(short.headers['x-cache-status'], 'REFRESH');
    await h.waitFor(async () => (await other.post(CHAT, body)).json.id === short.json.id,
        {what: 'the second instance to answer the short-lived answer'});
    await h.waitFor(async () => (await other.post(CHAT, body)).headers['x-cache-status'] === 'MISS',
        {what: 'the short-lived answer to expire in the second instance too'});
    assert.equal((await stats(other)).l1_events_rejected, 0);
    await other.stop(5000);
});

/*
 * A full Redis (maxmemory reached, noeviction) refuses XADD, not UNLINK: a delete or a flush
 * whose stream event it refused reached Redis but not the other instances' L1, which served the
 * deleted answer for the rest of its TTL while the admin API answered 200. Such a delete fails
 * (503); run again once Redis takes writes, it tells every instance.
 */
h.test('a delete whose stream event Redis refuses fails; run again, it reaches every L1', async () => {
    const other = await env.startProxy({args: ['--admin-token', ADMIN_TOKEN]});
    await waitLive(other);
    await waitLive(env.proxy);
    const one = h.chatBody(h.uniq('l1 full redis entry'));
    const all = h.chatBody(h.uniq('l1 full redis flush'));
    const model = h.chatBody(h.uniq('l1 full redis model'), {model: 'l1-full-redis-model'});
    const id = (await stored(other, one)).headers['x-cache-key'];
    await stored(other, all);
    await stored(other, model);
    for (const body of [one, all, model])
        await inL1(env.proxy, body);
    const purge = () => h.request(other.url, {method: 'DELETE', path: '/admin/cache?model=l1-full-redis-model',
        headers: {authorization: `Bearer ${ADMIN_TOKEN}`}});
    const del = () => h.request(other.url, {method: 'DELETE', path: `/admin/cache/entries/${id}`,
        headers: {authorization: `Bearer ${ADMIN_TOKEN}`}});
    const [, policy] = await env.redis.command('CONFIG', 'GET', 'maxmemory-policy');
    await env.redis.command('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
    await env.redis.command('CONFIG', 'SET', 'maxmemory', '1');
    try {
        const r1 = await del();
        assert.equal(r1.status, 503, `delete of one entry: ${r1.text}`);
        const r3 = await purge();
        assert.equal(r3.status, 503, `purge by model: ${r3.text}`);
        const r2 = await flush(other);
        assert.equal(r2.status, 503, `flush: ${r2.text}`);
    } finally {
        await env.redis.command('CONFIG', 'SET', 'maxmemory', '0');
        await env.redis.command('CONFIG', 'SET', 'maxmemory-policy', policy);
    }
    assert.equal((await del()).status, 200);
    assert.equal((await flush(other)).status, 200);
    for (const body of [one, all, model])
        await h.waitFor(async () => (await env.proxy.post(CHAT, body, {'cache-control': 'no-store'}))
            .headers['x-cache-status'] === 'MISS', {what: 'the delete applied to the other L1'});
    await other.stop(5000);
});

/*
 * A delete by filter (namespace, model, older-than) picks and unlinks its entries in one
 * script: a full Redis (noeviction) let the UNLINKs through and refused the del events, so
 * the 503 came after the entries were gone, and running it again (as the 503 asks) found
 * nothing to delete and told no instance: their L1 served the deleted answers until their
 * TTL. A full Redis now refuses the script before it deletes anything.
 */
h.test('a delete by filter that a full Redis refuses deletes nothing; run again, it reaches every L1', async () => {
    const other = await env.startProxy({args: ['--admin-token', ADMIN_TOKEN]});
    await waitLive(other);
    await waitLive(env.proxy);
    const model = `l1-full-filter-${h.uniq('m').split(' ')[1]}`;
    const body = h.chatBody(h.uniq('l1 full redis filter'), {model});
    const id = (await stored(other, body)).headers['x-cache-key'];
    const key = `pc:2:e:{${id.slice(0, 16)}:${id.slice(16)}}`;
    assert.equal(Number(await env.redis.command('EXISTS', key)), 1);
    await inL1(env.proxy, body);
    const purge = () => h.request(other.url, {method: 'DELETE', path: `/admin/cache?model=${model}`,
        headers: {authorization: `Bearer ${ADMIN_TOKEN}`}});
    const [, policy] = await env.redis.command('CONFIG', 'GET', 'maxmemory-policy');
    await env.redis.command('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
    await env.redis.command('CONFIG', 'SET', 'maxmemory', '1');
    try {
        const r = await purge();
        assert.equal(r.status, 503, r.text);
    } finally {
        await env.redis.command('CONFIG', 'SET', 'maxmemory', '0');
        await env.redis.command('CONFIG', 'SET', 'maxmemory-policy', policy);
    }
    assert.equal(Number(await env.redis.command('EXISTS', key)), 1, 'nothing deleted by the refused purge');
    const again = await purge();
    assert.equal(again.status, 200, again.text);
    assert.equal(again.json.deleted, 1, 'run again, it deletes the entry');
    await h.waitFor(async () => (await env.proxy.post(CHAT, body, {'cache-control': 'no-store'}))
        .headers['x-cache-status'] === 'MISS', {what: 'the delete applied to the other L1', timeout: 10000});
    await other.stop(5000);
});

h.test('a tenant flush drops only that tenant from the L1', async () => {
    await waitLive(env.proxy);
    const a = h.chatBody(h.uniq('l1 tenant a'));
    const b = h.chatBody(h.uniq('l1 tenant b'));
    await stored(env.proxy, a, h.bearer('sk-l1-a'));
    await stored(env.proxy, b, h.bearer('sk-l1-b'));
    const hit = await env.proxy.post(CHAT, a, h.bearer('sk-l1-a'));
    h.assertHit(hit);
    /* This request's line, by its id: an earlier request's may still be on its way. */
    const line = await env.proxy.waitAccessLog((l) => l.id === hit.headers['x-promptcache-request-id']);
    const r = await flush(env.proxy, line.tenant);
    assert.ok(r.status >= 200 && r.status < 300, `flush: ${r.status} ${r.text}`);
    h.assertFromUpstream(await env.proxy.post(CHAT, a, h.bearer('sk-l1-a')), env.mock);
    const s0 = await stats(env.proxy);
    h.assertHit(await env.proxy.post(CHAT, b, h.bearer('sk-l1-b')));
    assert.equal((await stats(env.proxy)).l1_hits - s0.l1_hits, 1, 'tenant b still in the L1');
});

h.test('an L1 entry lives no longer than its Redis key', async () => {
    await waitLive(env.proxy);
    const body = h.chatBody(h.uniq('l1 ttl'));
    const old = new Set(await env.redis.keys('pc:2:e:*'));
    /* in the L1 (stored() saw an L1 hit) before the key's 2 s are over */
    await stored(env.proxy, body, {'x-cache-ttl': '2'});
    const keys = (await env.redis.keys('pc:2:e:*')).filter((k) => !old.has(k));
    assert.equal(keys.length, 1, 'one new entry');
    await h.waitFor(async () => Number(await env.redis.command('EXISTS', keys[0])) === 0,
        {what: 'the Redis key to expire'});
    /* Redis no longer has it, so neither may the L1. */
    h.assertFromUpstream(await env.proxy.post(CHAT, body), env.mock);
});

h.test('max-age is honoured on an L1 hit', async () => {
    await waitLive(env.proxy);
    const body = h.chatBody(h.uniq('l1 max-age'));
    await stored(env.proxy, body);
    const fresh = await h.waitFor(async () => {
        const r = await env.proxy.post(CHAT, body, {'cache-control': 'max-age=0'});
        return r.headers['x-cache-status'] !== 'HIT' ? r : null;
    }, {what: 'an entry older than 0 s refused'});
    /* The refused entry's fresh answer replaced it, in Redis and then in the L1. */
    const r = await inL1(env.proxy, body);
    assert.equal(r.json.id, fresh.json.id, 'without max-age the L1 answers, the newest answer');
});

h.test('while Redis is down the L1 is off and requests still get answers', async () => {
    await waitLive(env.proxy);
    const body = h.chatBody(h.uniq('l1 redis down'));
    await stored(env.proxy, body);
    await env.redis.stop();
    try {
        await waitLive(env.proxy, false);
        const s = await stats(env.proxy);
        assert.equal(s.l1_items, 0, 'emptied');
        const calls = env.mock.callCount(CHAT);
        const r = await env.proxy.post(CHAT, body);
        assert.equal(r.status, 200, r.text);
        assert.equal(r.headers['x-cache-status'], 'BYPASS');
        assert.equal(env.mock.callCount(CHAT), calls + 1, 'the upstream answered');
    } finally {
        await env.redis.restart();
    }
    await waitLive(env.proxy, true);
    await env.proxy.waitReady();
});

h.test('with the default redis-timeout the L1 stays on while the stream is idle', async () => {
    /* The reader's XREAD blocks for a second: its reply timeout is not redis-timeout (50 ms). */
    const p = await env.startProxy({args: ['--redis-timeout', '50']});
    await waitLive(p);
    const body = h.chatBody(h.uniq('l1 idle stream'));
    await stored(p, body);
    const s0 = await stats(p);
    await h.waitFor(async () => (await stats(p)).stream_reads >= s0.stream_reads + 2,
        {what: 'two idle XREAD rounds', timeout: 15000});
    const s1 = await stats(p);
    assert.equal(s1.l1_clears, s0.l1_clears, 'not emptied');
    assert.equal(s1.l1_live, true);
    h.assertHit(await p.post(CHAT, body));
    assert.equal((await stats(p)).l1_hits - s1.l1_hits, 1);
    await p.stop(5000);
});

h.test('Redis frozen: the L1 answers until its reader gives up, then requests bypass', async () => {
    const p = await env.startProxy({args: ['--redis-timeout', '50']});
    await waitLive(p);
    const body = h.chatBody(h.uniq('l1 frozen'));
    await stored(p, body);
    const pid = env.redis.proc.pid;
    process.kill(pid, 'SIGSTOP');
    try {
        const s0 = await stats(p);
        h.assertHit(await p.post(CHAT, body));
        assert.equal((await stats(p)).l1_hits - s0.l1_hits, 1, 'a hit without Redis');
        await waitLive(p, false);
        const calls = env.mock.callCount(CHAT);
        const r = await p.post(CHAT, body);
        assert.equal(r.status, 200, r.text);
        assert.equal(r.headers['x-cache-status'], 'BYPASS');
        assert.equal(env.mock.callCount(CHAT), calls + 1);
    } finally {
        process.kill(pid, 'SIGCONT');
    }
    await waitLive(p, true);
    await p.stop(5000);
});

h.test('the L1 stays within l1-size, evicting the least recently used', async () => {
    const p = await env.startProxy({args: ['--l1-size', '1m']});
    await waitLive(p);
    const hot = h.chatBody(h.uniq('l1 hot'));
    await stored(p, hot);
    const tag = h.uniq('l1 fill');
    for (let i = 0; i < 2400; i += 60) {
        await Promise.all(Array.from({length: 60}, (_, k) => p.post(CHAT, h.chatBody(`${tag} ${i + k}`))));
        h.assertHit(await p.post(CHAT, hot)); /* kept recent */
    }
    /* The hot one and 2400 more: each inserted, dropped by a full queue, or dropped because a
     * change of a key sharing its stamp came while it was written (rare; counted in l1_stale). */
    await h.waitFor(async () => {
        const st = await stats(p);
        return st.l1_inserts + st.l1_dropped + st.l1_stale >= 2401;
    }, {what: 'every answer offered to the L1'});
    const s = await stats(p);
    assert.equal(s.l1_max_bytes, 1024 * 1024);
    assert.ok(s.l1_bytes <= s.l1_max_bytes, `l1_bytes ${s.l1_bytes}`);
    assert.ok(s.l1_evictions > 0, 'evictions happened');
    assert.ok(s.l1_items < 2400, `${s.l1_items} items held`);
    const before = s.l1_hits;
    h.assertHit(await p.post(CHAT, hot));
    assert.equal((await stats(p)).l1_hits - before, 1, 'the hot entry is still in the L1');
    await p.stop(5000);
});

/* Commands of one kind Redis has served so far (INFO commandstats). */
async function redisCalls(cmd) {
    const info = String(await env.redis.command('INFO', 'commandstats'));
    const m = new RegExp(`cmdstat_${cmd}:calls=(\\d+)`).exec(info);
    return m ? Number(m[1]) : 0;
}

/*
 * A hit read from Redis is copied and its key's PTTL asked, to put it into the L1: also for
 * an answer the L1 never keeps (larger than l1-size / 128), a copy and a round trip per hit
 * for nothing.
 */
h.test('a hit too large for the L1 is not copied for it nor its TTL asked', async () => {
    const p = await env.startProxy({args: ['--l1-size', '1m']});
    await waitLive(p);
    const big = h.chatBody(h.uniq('l1 too large'));
    h.assertFromUpstream(await p.post(CHAT, big, {'x-mock-size': '20000'}), env.mock);
    const small = h.chatBody(h.uniq('l1 small enough'));
    await stored(p, small);
    /* a small entry read from Redis (stored through another instance) asks its TTL once */
    const other = await env.startProxy();
    const smallOther = h.chatBody(h.uniq('l1 small other'));
    h.assertFromUpstream(await other.post(CHAT, smallOther), env.mock);
    await other.stop(5000);
    const pttl0 = await redisCalls('pttl');
    h.assertHit(await p.post(CHAT, smallOther));
    await h.waitFor(async () => (await redisCalls('pttl')) === pttl0 + 1, {what: 'the PTTL of a small hit'});
    const pttl1 = await redisCalls('pttl');
    for (let i = 0; i < 3; i++)
        h.assertHit(await p.post(CHAT, big));
    /* the hits are answered after their GET; a PTTL would have been sent with them */
    h.assertHit(await p.post(CHAT, smallOther));
    assert.equal(await redisCalls('pttl'), pttl1, 'no PTTL for an answer the L1 does not keep');
    await p.stop(5000);
});

h.test('a refreshed answer replaces the L1\'s at once, also one too large for the L1', async () => {
    /* l1-size 1m: items up to 8 KiB; the refreshed answer (20 KB) never goes in. */
    const p = await env.startProxy({args: ['--l1-size', '1m']});
    await waitLive(p);
    for (const size of [0, 20000]) {
        const body = h.chatBody(h.uniq(`l1 refresh ${size}`));
        const old = await stored(p, body);
        const fresh = await p.post(CHAT, body, {'cache-control': 'no-cache', 'x-mock-size': String(size)});
        h.assertFromUpstream(fresh, env.mock, 'REFRESH');
        /* the client has the fresh answer: from now on nobody gets the old one */
        const again = await p.post(CHAT, body);
        h.assertHit(again);
        assert.notEqual(h.chatText(fresh.json), h.chatText(old.json));
        assert.equal(h.chatText(again.json), h.chatText(fresh.json), `the refreshed answer (size ${size})`);
    }
    await p.stop(5000);
});

/*
 * An operator's FLUSHALL (or FLUSHDB) in Redis itself deletes the stream too; its next XADD
 * makes a new one, which XREAD reads on from the old position as if nothing had happened.
 * The follower notices the deletion (entries-added below what it read) and the L1 starts
 * again empty: it served the flushed answers until their TTL before.
 */
h.test('a FLUSHALL done in Redis empties the L1, also when a write made the stream again', async () => {
    const redis = await h.startRedis();
    try {
        const p = await env.startProxy({redis});
        await p.waitReady();
        await waitLive(p);
        for (const rewrite of [false, true]) {
            const body = h.chatBody(h.uniq(`l1 flushall ${rewrite}`));
            await stored(p, body);
            await redis.command('FLUSHALL');
            if (rewrite) /* a new answer at once: its XADD makes the stream again */
                assert.equal((await p.post(CHAT, h.chatBody(h.uniq('l1 after flushall')))).status, 200);
            await h.waitFor(async () => (await p.post(CHAT, body, {'cache-control': 'no-store'}))
                .headers['x-cache-status'] === 'MISS', {what: 'the flushed answer gone from the L1', timeout: 15000});
            await waitLive(p);
        }
        await p.stop(5000);
    } finally {
        await redis.stop();
    }
});

/*
 * A write of this process that timed out is not known to have failed: Redis may apply it
 * later (its packet was lost and sent again, its connection was slow). Meanwhile another
 * worker read the old answer into the L1. Once the write lands, its stream event is this
 * process's own, which the L1 skipped: the old answer stayed in the L1, served for the rest
 * of its TTL while Redis (and every other instance) had the refreshed one.
 */
h.test('a refresh whose store timed out and landed later does not leave the old answer in the L1', async () => {
    const relay = await h.startRelay(env.redis.port);
    const pending = [];
    try {
        /* Two workers: one waits on its held write, the other reads. */
        const p = await env.startProxy({args: ['--redis', relay.url, '--workers', '2', '--redis-timeout', '1500']});
        await waitLive(p);
        const body = h.chatBody(h.uniq('l1 late write'));
        const old = await stored(p, body);
        const skipped = (await stats(p)).cache_store_skipped;
        relay.arm();
        let fresh;
        try {
            fresh = await p.post(CHAT, body, {'cache-control': 'no-cache'});
            h.assertFromUpstream(fresh, env.mock, 'REFRESH');
            assert.notEqual(h.chatText(fresh.json), h.chatText(old.json));
            assert.equal(relay.holding(), 1, 'its SET held');
            assert.equal((await stats(p)).cache_store_skipped, skipped + 1, 'the store timed out');
            /* The other worker reads the old answer from Redis, into the L1 again. (A request
             * on the waiting worker waits with it: not awaited here.) */
            const inserts = (await stats(p)).l1_inserts;
            await h.waitFor(async () => {
                pending.push(p.post(CHAT, body, {'cache-control': 'no-store'}));
                return (await stats(p)).l1_inserts > inserts;
            }, {what: 'the old answer read into the L1', interval: 20});
            /* Those that reached the waiting worker's GET time out: none reads the new answer. */
            for (const r of await Promise.all(pending))
                assert.equal(r.status, 200, r.text);
        } finally {
            relay.release();
        }
        /* Redis has the refreshed answer now (the SET landed: an instance without an L1 reads
         * it); so must this instance, within a moment. */
        const direct = await env.startProxy({args: ['--l1-size', '0']});
        await h.waitFor(async () => h.chatText((await direct.post(CHAT, body, {'cache-control': 'no-store'})).json)
            === h.chatText(fresh.json), {what: 'the late SET applied in Redis'});
        await direct.stop(5000);
        await h.waitFor(async () => {
            const r = await p.post(CHAT, body, {'cache-control': 'no-store'});
            h.assertHit(r);
            return h.chatText(r.json) === h.chatText(fresh.json);
        }, {what: 'the refreshed answer served, not the old one from the L1', timeout: 10000});
        await p.stop(5000);
    } finally {
        await Promise.allSettled(pending);
        await relay.close();
    }
});

/*
 * The wall clock stepped back (an NTP step, a VM restored from a snapshot): an L1 deadline
 * on the wall clock moved an hour away, and the L1 served the answer for an hour after its
 * Redis key (whose TTL runs on Redis's own clock) had expired. A shim (LD_PRELOAD) moves
 * the proxy's CLOCK_REALTIME by the milliseconds written in a file.
 */
const CLOCK_SHIM = `#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long long offset_ms(void)
{
    const char *path = getenv("PC_TEST_CLOCK_FILE");
    long long v = 0;
    FILE *f = path != NULL ? fopen(path, "r") : NULL;
    if (f != NULL) {
        if (fscanf(f, "%lld", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    static int (*real)(clockid_t, struct timespec *);
    if (real == NULL)
        real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int rc = real(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ms() * 1000000LL;
        ts->tv_sec = ns / 1000000000LL;
        ts->tv_nsec = ns % 1000000000LL;
    }
    return rc;
}
`;

h.test('an L1 entry lives no longer than its Redis key when the wall clock steps back', async () => {
    const fs = require('node:fs');
    const path = require('node:path');
    const {execFileSync} = require('node:child_process');
    const dir = h.tmpDir('pc-clock-');
    const src = path.join(dir, 'clock.c'), so = path.join(dir, 'clock.so'), file = path.join(dir, 'offset');
    fs.writeFileSync(src, CLOCK_SHIM);
    execFileSync('cc', ['-shared', '-fPIC', '-O1', '-o', so, src, '-ldl']);
    fs.writeFileSync(file, '0');
    const asan = process.env.ASAN_OPTIONS ? `${process.env.ASAN_OPTIONS}:` : '';
    const p = await env.startProxy({env: {LD_PRELOAD: so, PC_TEST_CLOCK_FILE: file,
        ASAN_OPTIONS: `${asan}verify_asan_link_order=0`}});
    await waitLive(p);
    const body = h.chatBody(h.uniq('l1 clock step'));
    const old = new Set(await env.redis.keys('pc:2:e:*'));
    await stored(p, body, {'x-cache-ttl': '2'});
    const keys = (await env.redis.keys('pc:2:e:*')).filter((k) => !old.has(k));
    assert.equal(keys.length, 1, 'one new entry');
    fs.writeFileSync(file, String(-3600 * 1000)); /* an hour back */
    await h.waitFor(async () => Number(await env.redis.command('EXISTS', keys[0])) === 0,
        {what: 'the Redis key to expire'});
    h.assertFromUpstream(await p.post(CHAT, body, {'cache-control': 'no-store'}), env.mock);
    await p.stop(5000);
});

h.test('l1-size 0 turns the L1 off', async () => {
    const off = await env.startProxy({args: ['--l1-size', '0']});
    const body = h.chatBody(h.uniq('l1 off'));
    h.assertFromUpstream(await off.post(CHAT, body), env.mock);
    h.assertHit(await off.post(CHAT, body)); /* stored before the first answer was sent */
    const s = await stats(off);
    assert.equal(s.l1_hits, 0);
    assert.equal(s.l1_live, undefined, 'no L1 figures without an L1');
    await off.stop(5000);
});
