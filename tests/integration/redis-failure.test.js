'use strict';
/*
 * Redis is an optimisation, never a dependency: when it dies (SIGKILL) while
 * requests keep flowing, no request fails (they bypass the cache), /readyz
 * says 503; when it comes back on the same port the proxy reconnects (and
 * migrates the empty store) by itself and hits resume.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

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
                results.push({status: r.status, cache: r.cache, ms: Date.now() - started, at: Date.now(),
                    text: r.status === 200 ? '' : r.text.slice(0, 200)});
            } catch (e) {
                results.push({error: e.message, at: Date.now()});
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

        const killedAt = Date.now();
        await env.redis.kill();
        await h.waitFor(() => since(results, killedAt).some((r) => r.cache === 'BYPASS'),
            {timeout: 10000, what: 'a BYPASS while Redis is down'});
        await env.proxy.waitReady(503, 10000);

        const restartedAt = Date.now();
        await env.redis.restart();
        await h.waitFor(() => since(results, restartedAt).some((r) => r.cache === 'HIT'),
            {timeout: 30000, what: 'hits to resume after Redis came back'});
        await env.proxy.waitReady(200, 10000);
    } finally {
        await load.stop();
    }
    const failed = results.filter((r) => r.error || r.status !== 200);
    assert.deepEqual(failed, [], `${failed.length} of ${results.length} requests failed`);
    const slow = results.filter((r) => r.ms > 2000);
    assert.deepEqual(slow, [], 'no request waited long on the dead Redis');
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
        await h.waitFor(async () => (await proxy.post(CHAT, body)).cache === 'HIT',
            {timeout: 10000, what: 'a HIT once Redis is up'});
        assert.equal(await redis.command('GET', 'pc:schema'), String(h.latestSchemaVersion()),
            'the proxy migrated the new store');
    } finally {
        assert.equal(await proxy.stop(), 0);
        await redis.stop();
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
    const pid = env.redis.proc.pid;
    try {
        await h.waitFor(() => results.filter((r) => r.cache === 'HIT').length >= 3,
            {what: 'hits before the freeze'});
        const frozenAt = Date.now();
        process.kill(pid, 'SIGSTOP');
        await h.waitFor(() => since(results, frozenAt).filter((r) => r.cache === 'BYPASS').length >= 3,
            {timeout: 10000, what: 'BYPASS answers while Redis is frozen'});
        const thawedAt = Date.now();
        process.kill(pid, 'SIGCONT');
        await h.waitFor(() => since(results, thawedAt).some((r) => r.cache === 'HIT'),
            {timeout: 30000, what: 'hits to resume after Redis thawed'});
    } finally {
        try { process.kill(pid, 'SIGCONT'); } catch (e) { /* already running or gone */ }
        await load.stop();
    }
    const failed = results.filter((r) => r.error || r.status !== 200);
    assert.deepEqual(failed, [], `${failed.length} of ${results.length} requests failed`);
    const slow = results.filter((r) => r.ms > 2000);
    assert.deepEqual(slow, [], 'no request waited long on the frozen Redis');
    const stats = await env.proxy.stats();
    assert.ok(stats.redis_timeouts > before.redis_timeouts, 'redis_timeouts counted');
});
