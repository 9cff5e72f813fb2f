'use strict';
/*
 * conf/prometheus-alerts.yml: promtool accepts the rules, its unit tests
 * (tests/integration/alerts/prometheus-alerts.test.yml) fire each alert on
 * synthetic series, every series the rules read is one the proxy exports,
 * and the gauges the Redis and L1 alerts watch really turn 0 when the
 * proxy's Redis goes away (and 1 again when it is back).
 */
const assert = require('node:assert/strict');
const path = require('node:path');
const fs = require('node:fs');
const {spawnSync} = require('node:child_process');
const h = require('./lib');

const RULES = path.join(h.REPO, 'conf', 'prometheus-alerts.yml');
const UNIT = path.join(__dirname, 'alerts', 'prometheus-alerts.test.yml');
const env = h.environment();

function promtool(args) {
    const r = spawnSync('promtool', args, {encoding: 'utf8'});
    assert.equal(r.error, undefined, 'promtool is installed (make deps-test)');
    return r;
}

/* The gauge's value in a /metrics text (NaN if absent). */
function gauge(text, name) {
    const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
    return m ? Number(m[1]) : NaN;
}

h.test('promtool check rules accepts conf/prometheus-alerts.yml', () => {
    const r = promtool(['check', 'rules', RULES]);
    assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
    assert.match(r.stdout, /SUCCESS: 8 rules found/);
});

h.test('promtool test rules: each alert fires on its synthetic series, for that instance only', () => {
    const r = promtool(['test', 'rules', UNIT]);
    assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
    const tested = new Set([...fs.readFileSync(UNIT, 'utf8').matchAll(/alertname: (\w+)/g)].map((m) => m[1]));
    const defined = [...fs.readFileSync(RULES, 'utf8').matchAll(/- alert: (\w+)/g)].map((m) => m[1]);
    assert.deepEqual(defined.sort(), ['PromptcacheHitRateFallen', 'PromptcacheL1Off',
        'PromptcacheRedisUnreachable', 'PromptcacheSemanticShed', 'PromptcacheUpstreamErrors']);
    for (const a of defined)
        assert.ok(tested.has(a), `${a} has a unit test`);
});

h.test('every series the rules read is one the proxy exports', async () => {
    const text = (await env.proxy.get('/metrics')).text;
    const exported = new Set([...text.matchAll(/^# TYPE (\w+) /gm)].map((m) => m[1]));
    const rules = fs.readFileSync(RULES, 'utf8').replace(/^\s*#.*$/gm, '');
    const used = new Set([...rules.matchAll(/\b(promptcache_\w+)/g)].map((m) => m[1]));
    assert.ok(used.size >= 9, [...used].join());
    for (const name of used)
        assert.ok(exported.has(name), `${name} is exported`);
});

h.test('promptcache_ready and promptcache_l1_live follow the proxy\'s Redis', async () => {
    const redis = await h.startRedis();
    try {
        const p = await env.startProxy({redis: redis.url});
        await p.waitReady();
        const metrics = async () => (await p.get('/metrics')).text;
        await h.waitFor(async () => {
            const t = await metrics();
            return gauge(t, 'promptcache_ready') === 1 && gauge(t, 'promptcache_l1_live') === 1;
        }, {what: 'ready and the L1 live'});
        await redis.stop();
        await h.waitFor(async () => {
            const t = await metrics();
            return gauge(t, 'promptcache_ready') === 0 && gauge(t, 'promptcache_l1_live') === 0;
        }, {timeout: 20000, what: 'ready 0 and the L1 off with Redis gone'});
        assert.equal((await p.get('/readyz')).status, 503, '/readyz says the same');
        await redis.restart();
        await h.waitFor(async () => gauge(await metrics(), 'promptcache_ready') === 1,
            {timeout: 20000, what: 'ready again'});
        await p.stop();
    } finally {
        if (redis.alive)
            await redis.stop();
    }
});
