'use strict';
/*
 * The proxy's own endpoints: /healthz (process up), /readyz (Redis ready),
 * /stats (flat JSON of the metrics table plus hit_rate) and /metrics
 * (Prometheus text). The metric names are read from include/pc_stats.h so
 * this test follows the table.
 */
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./lib');

const env = h.environment();

const CHAT = '/v1/chat/completions';

/* Names and kinds of the metrics table rows: ACTION(name, kind, "help"). */
function metricsTable() {
    const header = fs.readFileSync(path.join(h.REPO, 'include', 'pc_stats.h'), 'utf8');
    const rows = [...header.matchAll(/ACTION\((\w+),\s*(counter|gauge),/g)];
    assert.ok(rows.length > 10, 'metrics table found in include/pc_stats.h');
    return rows.map((m) => ({name: m[1], kind: m[2]}));
}

h.test('/healthz answers 200', async () => {
    const r = await env.proxy.get('/healthz');
    assert.equal(r.status, 200);
});

h.test('/readyz answers 200 while Redis is connected', async () => {
    assert.equal((await env.proxy.get('/readyz')).status, 200);
});

h.test('/stats is a flat JSON object with every metric and hit_rate', async () => {
    const r = await env.proxy.get('/stats');
    assert.equal(r.status, 200);
    assert.match(String(r.headers['content-type']), /application\/json/);
    const stats = r.json;
    for (const {name} of metricsTable())
        assert.equal(typeof stats[name], 'number', `/stats.${name}`);
    assert.equal(typeof stats.hit_rate, 'number', '/stats.hit_rate');
    assert.ok(stats.hit_rate >= 0 && stats.hit_rate <= 1);
});

h.test('/stats counts a miss, a store and a hit', async () => {
    const before = await env.proxy.stats();
    const body = h.chatBody(h.uniq('stats'));
    await env.proxy.post(CHAT, body);
    /* Stored (and counted) before the answer was sent. */
    assert.equal((await env.proxy.stats()).cache_stores - before.cache_stores, 1);
    h.assertHit(await env.proxy.post(CHAT, body));
    await h.eventually(async () => {
        const after = await env.proxy.stats();
        const d = (k) => after[k] - before[k];
        assert.equal(d('cache_misses'), 1, 'cache_misses');
        assert.equal(d('cache_hits'), 1, 'cache_hits');
        assert.equal(d('cache_hits_exact'), 1, 'cache_hits_exact');
        assert.equal(d('upstream_requests'), 1, 'upstream_requests');
        assert.equal(d('requests_cacheable'), 2, 'requests_cacheable');
        assert.ok(d('requests_total') >= 2, 'requests_total');
        assert.ok(d('tokens_saved_completion') > 0, 'tokens_saved_completion');
        assert.ok(d('tokens_upstream_prompt') > 0, 'tokens_upstream_prompt');
        assert.ok(after.hit_rate > 0);
    });
});

h.test('/metrics is Prometheus text with every metric', async () => {
    const r = await env.proxy.get('/metrics');
    assert.equal(r.status, 200);
    assert.match(String(r.headers['content-type']), /^text\/plain/);
    const lines = r.text.split('\n');
    for (const {name, kind} of metricsTable()) {
        const re = new RegExp(`^promptcache_${name}(_total)?(\\{[^}]*\\})? (-?[0-9.eE+-]+|NaN)$`);
        assert.ok(lines.some((l) => re.test(l)), `a sample of promptcache_${name}`);
        const type = new RegExp(`^# TYPE promptcache_${name}(_total)? ${kind}$`);
        assert.ok(lines.some((l) => type.test(l)), `# TYPE promptcache_${name} ${kind}`);
    }
    for (const l of lines.filter((x) => x && !x.startsWith('#')))
        assert.match(l, /^promptcache_\w+(\{[^}]*\})? \S+$/, `well-formed sample line: ${l}`);
});

h.test('/metrics and /stats agree', async () => {
    const stats = await env.proxy.stats();
    const text = (await env.proxy.get('/metrics')).text;
    const m = /^promptcache_cache_hits(?:_total)? (\d+)$/m.exec(text);
    assert.ok(m, 'promptcache_cache_hits sample');
    assert.equal(Number(m[1]), stats.cache_hits);
});

h.test('/readyz answers 503 while Redis is down, /healthz still 200', async () => {
    await env.redis.kill();
    try {
        await env.proxy.waitReady(503, 10000);
        assert.equal((await env.proxy.get('/healthz')).status, 200);
        const r = await env.proxy.post(CHAT, h.chatBody(h.uniq('redis down')));
        assert.equal(r.status, 200);
        assert.equal(r.headers['x-cache-status'], 'BYPASS');
        await h.eventually(async () =>
            assert.equal((await env.proxy.stats()).redis_connected, 0, 'redis_connected gauge'));
    } finally {
        await env.redis.restart();
    }
    await env.proxy.waitReady(200, 20000);
    await h.eventually(async () =>
        assert.equal((await env.proxy.stats()).redis_connected, 2, 'both workers reconnected'));
});
