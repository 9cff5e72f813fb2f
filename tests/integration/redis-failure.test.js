'use strict';
/*
 * Redis is an optimisation, never a dependency: when it dies (SIGKILL) while
 * requests keep flowing, no request fails (they bypass the cache), /readyz
 * says 503; when it comes back on the same port the proxy reconnects (and
 * migrates the empty store) by itself and hits resume.
 */
const assert = require('node:assert/strict');
const net = require('node:net');
const h = require('./lib');
const {createSemanticMock} = require('../mock/semantic');

/* The Redis path itself is under test: no L1 in front of it (l1.test.js covers the L1, which
 * answers hot entries through a freeze until its stream reader gives up). */
const env = h.environment({proxyArgs: ['--redis-timeout', '50', '--l1-size', '0']});

const CHAT = '/v1/chat/completions';
const MAX_REQUESTS = 5000; /* the load loop is bounded in count as well as in time */

/* Sequential requests over a few prompts until stopped; every outcome is recorded. */
function startLoad(proxy, prompts, results) {
    const state = {stopped: false};
    const loop = async (offset) => {
        for (let i = offset; !state.stopped && results.length < MAX_REQUESTS; i++) {
            const started = Date.now();
            try {
                const r = await proxy.post(CHAT, h.chatBody(prompts[i % prompts.length]));
                results.push({status: r.status, cache: r.cache, started, at: Date.now(),
                    text: r.status === 200 ? '' : r.text.slice(0, 200)});
            } catch (e) {
                results.push({error: e.message, started, at: Date.now()});
            }
        }
    };
    const loops = [loop(0), loop(1)];
    state.stop = async () => {
        state.stopped = true;
        await Promise.all(loops);
    };
    return state;
}

const since = (results, t) => results.filter((r) => r.at >= t);

/*
 * No request waits for Redis to come back: those sent while it was away
 * (from..to) were answered before it came back, each a BYPASS (how long each
 * took is the machine's business, not asserted).
 */
function assertAnsweredWhileAway(results, from, to, what) {
    const away = results.filter((r) => r.started >= from && r.at < to);
    assert.ok(away.length >= 1, `requests sent and answered while Redis was ${what}`);
    assert.deepEqual(away.filter((r) => r.cache !== 'BYPASS'), [], `answers while Redis was ${what}`);
}

h.test('Redis killed mid-run: no request fails, hits resume after restart', async () => {
    const prompts = [h.uniq('redis a'), h.uniq('redis b'), h.uniq('redis c')];
    for (const p of prompts)
        await env.proxy.post(CHAT, h.chatBody(p));
    const before = await env.proxy.stats();
    const results = [];
    const load = startLoad(env.proxy, prompts, results);
    try {
        await h.waitFor(() => results.filter((r) => r.cache === 'HIT').length >= 5,
            {what: 'hits before the outage'});

        await env.redis.kill();
        const killedAt = Date.now();
        await h.waitFor(() => results.some((r) => r.started >= killedAt && r.cache === 'BYPASS'),
            {timeout: 10000, what: 'a BYPASS for a request sent while Redis is down'});
        await env.proxy.waitReady(503, 10000);

        const restartedAt = Date.now();
        assertAnsweredWhileAway(results, killedAt, restartedAt, 'down');
        await env.redis.restart();
        await h.waitFor(() => since(results, restartedAt).some((r) => r.cache === 'HIT'),
            {timeout: 30000, what: 'hits to resume after Redis came back'});
        await env.proxy.waitReady(200, 10000);
    } finally {
        await load.stop();
    }
    const failed = results.filter((r) => r.error || r.status !== 200);
    assert.deepEqual(failed, [], `${failed.length} of ${results.length} requests failed`);
    const stats = await env.proxy.stats();
    assert.ok(stats.cache_bypasses > before.cache_bypasses, 'cache_bypasses counted');
    assert.ok(stats.redis_reconnects > before.redis_reconnects, 'redis_reconnects counted');
});

h.test('Redis not there at start: requests bypass, then the proxy connects by itself', async () => {
    const port = await h.freePort();
    const proxy = await env.startProxy({redis: `redis://127.0.0.1:${port}/0`});
    assert.equal((await proxy.get('/healthz')).status, 200, '/healthz: the process is up');
    assert.equal((await proxy.get('/readyz')).status, 503, '/readyz: Redis is not ready');

    const body = h.chatBody(h.uniq('no redis yet'));
    const r = await proxy.post(CHAT, body);
    assert.equal(r.status, 200, r.text);
    h.assertFromUpstream(r, env.mock, 'BYPASS');

    const redis = await h.startRedis({port});
    try {
        await proxy.waitReady(200, 20000);
        /* once /readyz says so, an answer is stored (asked until it hits, a miss that stored
         * nothing would be hidden by the next one storing it) */
        h.assertFromUpstream(await proxy.post(CHAT, body), env.mock, 'MISS');
        h.assertHit(await proxy.post(CHAT, body));
        assert.equal(await redis.command('GET', 'pc:schema'), String(h.latestSchemaVersion()),
            'the proxy migrated the new store');
    } finally {
        assert.equal(await proxy.stop(), 0);
        await redis.stop();
    }
});

/*
 * A failover behind a name (a managed Redis's primary endpoint, a Kubernetes
 * service): connections made before it stay on the old primary, now a
 * replica that answers every write READONLY; new ones reach the new primary.
 * A TCP forwarder stands in for the name. The proxy connects again on
 * READONLY, so its stores reach the new primary; it kept the old connection
 * and failed every store until restarted.
 */
h.test('a failover behind the URL\'s name: READONLY makes the proxy connect again and store on the new primary', async () => {
    const a = await h.startRedis();
    const b = await h.startRedis();
    let target = a.port;
    const sockets = new Set();
    const fwd = net.createServer((c) => {
        const up = net.connect(target, '127.0.0.1');
        sockets.add(c);
        sockets.add(up);
        c.pipe(up).pipe(c);
        const end = () => { c.destroy(); up.destroy(); };
        c.on('error', end).on('close', end);
        up.on('error', end).on('close', end);
    });
    await new Promise((resolve) => fwd.listen(0, '127.0.0.1', resolve));
    const proxy = await env.startProxy({redis: `redis://127.0.0.1:${fwd.address().port}/0`});
    try {
        await proxy.waitReady(200, 20000);
        const before = h.uniq('before the failover');
        h.assertFromUpstream(await proxy.post(CHAT, h.chatBody(before)), env.mock, 'MISS');
        await h.eventually(async () => h.assertHit(await proxy.post(CHAT, h.chatBody(before))));
        /* The failover: b is the primary now, a its replica; new connections reach b. */
        target = b.port;
        await a.command('REPLICAOF', '127.0.0.1', String(b.port));
        await h.waitFor(async () => (await a.command('ROLE'))[3] === 'connected',
            {timeout: 20000, what: 'a to follow b'});
        await h.eventually(async () => {
            const p = h.uniq('after the failover');
            const r = await proxy.post(CHAT, h.chatBody(p));
            assert.equal(r.status, 200, r.text);
            h.assertHit(await proxy.post(CHAT, h.chatBody(p)));
        }, {timeout: 30000, interval: 200});
        assert.ok((await b.command('DBSIZE')) >= 1, 'entries written on the new primary');
        assert.match(proxy.stderr, /READONLY.*connecting again/);
    } finally {
        assert.equal(await proxy.stop(), 0);
        for (const s of sockets)
            s.destroy();
        await new Promise((resolve) => fwd.close(resolve));
        await a.stop();
        await b.stop();
    }
});

/* A Redis that stops answering (SIGSTOP: the connection stays open) is the slow case. */
h.test('Redis frozen mid-run: requests bypass within redis-timeout, hits resume when it thaws', async () => {
    const prompts = [h.uniq('frozen a'), h.uniq('frozen b')];
    for (const p of prompts)
        await env.proxy.post(CHAT, h.chatBody(p));
    await env.proxy.waitReady(200, 10000);
    const before = await env.proxy.stats();
    const results = [];
    const load = startLoad(env.proxy, prompts, results);
    try {
        await h.waitFor(() => results.filter((r) => r.cache === 'HIT').length >= 3,
            {what: 'hits before the freeze'});
        await env.redis.freeze();
        const frozenAt = Date.now();
        await h.waitFor(() => results.filter((r) => r.started >= frozenAt && r.cache === 'BYPASS').length >= 3,
            {timeout: 10000, what: 'BYPASS answers to requests sent while Redis is frozen'});
        const thawedAt = Date.now();
        assertAnsweredWhileAway(results, frozenAt, thawedAt, 'frozen');
        env.redis.thaw();
        await h.waitFor(() => since(results, thawedAt).some((r) => r.cache === 'HIT'),
            {timeout: 30000, what: 'hits to resume after Redis thawed'});
    } finally {
        env.redis.thaw();
        await load.stop();
    }
    const failed = results.filter((r) => r.error || r.status !== 200);
    assert.deepEqual(failed, [], `${failed.length} of ${results.length} requests failed`);
    const stats = await env.proxy.stats();
    assert.ok(stats.redis_timeouts > before.redis_timeouts, 'redis_timeouts counted');
});

/*
 * CLIENT PAUSE ... WRITE (a failover, an operator) holds every write, and
 * Redis runs a connection's commands in order: the GETs sent after a held SET
 * on the same connection waited with it, so every request bypassed the cache
 * for as long as the pause lasted (and the connection was dropped as stalled,
 * again and again). Writes have a connection of their own: reads still hit, a
 * miss is answered after redis-timeout at most, and answers are stored again
 * once the pause ends.
 */
h.test('CLIENT PAUSE WRITE: cached answers still hit, misses are answered, stores resume after it', async () => {
    const redis = await h.startRedis();
    const proxy = await env.startProxy({redis: redis.url});
    try {
        const old = h.uniq('stored before the pause');
        await proxy.waitReady(200, 20000);
        await proxy.post(CHAT, h.chatBody(old));
        await h.eventually(async () => h.assertHit(await proxy.post(CHAT, h.chatBody(old))));
        const before = await proxy.stats();
        await redis.command('CLIENT', 'PAUSE', '60000', 'WRITE');
        const during = [];
        try {
            for (let i = 0; i < 20; i++) {
                const r = await proxy.post(CHAT, h.chatBody(i % 2 ? old : h.uniq('new during the pause')));
                during.push({status: r.status, cache: r.cache, old: i % 2 === 1});
            }
        } finally {
            await redis.command('CLIENT', 'UNPAUSE');
        }
        assert.deepEqual(during.filter((r) => r.status !== 200), [], 'every request answered');
        assert.deepEqual(during.filter((r) => r.old && r.cache !== 'HIT'), [], 'the stored answer hit all along');
        const stats = await proxy.stats();
        assert.ok(stats.cache_store_skipped > before.cache_store_skipped, 'the held stores were skipped');
        const after = h.uniq('stored after the pause');
        await h.eventually(async () => {
            await proxy.post(CHAT, h.chatBody(after));
            h.assertHit(await proxy.post(CHAT, h.chatBody(after)));
        }, {timeout: 20000, interval: 100});
    } finally {
        assert.equal(await proxy.stop(), 0);
        await redis.stop();
    }
});

/*
 * embedder openai: at start the proxy reads a vector record to learn the dimension (a blocking
 * probe, semantic.c discover_dim). With Redis down or frozen it must start and answer all the
 * same: the probe's connection struct was not zeroed, so its failure message read an
 * uninitialised flag (UBSan aborted the sanitizer build at start, or the message went to stderr)
 * and the failed connection's URL leaked (LeakSanitizer failed the exit).
 */
h.test('semantic cache with a remote embedder: Redis down or frozen at start', async () => {
    const sem = await createSemanticMock().listen();
    const redis = await h.startRedis();
    const args = ['--semantic', 'yes', '--embedder', 'openai', '--embedder-url', sem.url,
        '--embedder-model', 'mock-bow', '--redis-timeout', '100'];
    try {
        for (const state of ['frozen', 'frozen', 'down']) {
            if (state === 'frozen')
                await redis.freeze();
            else if (redis.alive)
                await redis.stop();
            const proxy = await env.startProxy({redis: redis.url, args});
            const r = await proxy.post(CHAT, h.chatBody(h.uniq(`redis ${state} at start`)));
            assert.equal(r.status, 200, r.text);
            h.assertFromUpstream(r, env.mock, 'BYPASS');
            assert.equal(await proxy.stop(), 0, `exit (${state}): ${proxy.proc.tail(10)}`);
            assert.doesNotMatch(proxy.stderr, /promptcache semantic:/, 'the start probe is quiet');
            redis.thaw();
        }
    } finally {
        redis.thaw();
        if (redis.alive)
            await redis.stop();
        await sem.close();
    }
});
