'use strict';
/*
 * /dashboard/data reads hashes anyone with access to Redis may have filled:
 * the hourly counters (pc:2:r:YYYYMMDDHH) and the key fingerprints (pc:2:tk).
 * A read is bounded (fields read, fields kept, names summed by a render),
 * the dashboard answers and says what it left out, and the proxy's own
 * counts are still there.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment();
const CHAT = '/v1/chat/completions';
const FIELDS_MAX = 100000; /* src/dash.c */

async function dashboardWhen(proxy, pred, what) {
    return h.waitFor(async () => {
        const r = await proxy.get('/dashboard/data?hours=2');
        assert.equal(r.status, 200);
        return pred(r.json) ? r.json : null;
    }, {timeout: 60000, what});
}

h.test('an hour of 300k forged counters: a bounded part is read, the rest is noted', async () => {
    const r = await env.proxy.post(CHAT, h.chatBody(h.uniq('real traffic')));
    assert.equal(r.status, 200);
    await dashboardWhen(env.proxy, (j) => j.total.requests === 1, 'the real request counted');
    /* Hours are flushed by the workers; forge in the hour the dashboard reads last. */
    const key = h.tallyHourKey(Date.now());
    await h.forgeHash(env.redis, key, 300000, `'requests|-|forged-model-' .. i`, '1');
    await h.forgeHash(env.redis, key, 1000, `'junk ' .. i`, `'not a number'`);
    await h.forgeHash(env.redis, key, 10, `'hits|-|negative-' .. i`, '-5');
    /* A read publishes each hour as it is read and its note when it ends: wait for the end. */
    const d = await dashboardWhen(env.proxy, (j) => j.hours[1].requests > 1000 && !j.reading,
        'the forged hour read');
    assert.match(String(d.error), new RegExp(`^${key}: .*the rest was not read`));
    assert.ok(d.total.requests <= FIELDS_MAX + 1, `${d.total.requests} requests read: at most ${FIELDS_MAX} kept`);
    assert.ok(d.total.requests > 1000, 'a part of the hash was read');
    assert.equal(d.total.hits, 0, 'negative counts are skipped');
    assert.ok(d.models.length <= 20);
    assert.equal(d.models[0].model, '(other)', 'models past the render\'s room are summed as other');
    assert.equal(d.hours.reduce((s, x) => s + x.requests, 0), d.total.requests, 'hours add up to the total');
    /* The proxy serves on. */
    const after = await env.proxy.post(CHAT, h.chatBody(h.uniq('after the forgery')));
    assert.equal(after.status, 200);
});

h.test('200k forged key fingerprints: a bounded part is read, the rest is noted', async () => {
    await env.redis.command('DEL', h.tallyHourKey(Date.now()), h.tallyHourKey(Date.now() - 3600 * 1000));
    await h.forgeHash(env.redis, 'pc:2:tk', 200000, `string.format('%016x', i)`, `string.format('%016x', i)`);
    const proxy = await env.startProxy();
    const d = await dashboardWhen(proxy, (j) => j.read_ms > 0 && !j.reading, 'a read ended');
    assert.match(String(d.error), /^pc:2:tk: .*the rest was not read/);
    assert.equal((await proxy.post(CHAT, h.chatBody(h.uniq('after fingerprints')))).status, 200);
});

h.test('markup in a model name, from a client or forged in Redis, never reaches the page as markup', async () => {
    const url = env.redis.url.replace(/\/\d+$/, '/9');
    const proxy = await env.startProxy({redis: url});
    await proxy.waitReady();
    const evil = '<script>alert(1)</script><img src=x onerror=alert(2)>';
    const r = await proxy.post(CHAT, h.chatBody(h.uniq('markup model'), {model: evil}));
    assert.equal(r.status, 200);
    /* A field in promptcache's form but for its model: not one promptcache writes, skipped. */
    await env.redis.command('EVAL', "redis.call('SELECT', 9) redis.call('HSET', KEYS[1], ARGV[1], '7')",
        '1', h.tallyHourKey(Date.now()), 'requests|-|<img src=x onerror=alert(3)>');
    assert.equal(await env.redis.command('EVAL', "redis.call('SELECT', 9) return redis.call('HGET', KEYS[1], ARGV[1])",
        '1', h.tallyHourKey(Date.now()), 'requests|-|<img src=x onerror=alert(3)>'), '7');
    const d = await dashboardWhen(proxy, (j) => j.total.requests === 1, 'the request counted');
    const text = JSON.stringify(d);
    assert.ok(!/[<>]/.test(text), `no markup in /dashboard/data: ${text.slice(0, 300)}`);
    assert.equal(d.models.length, 1);
    assert.equal(d.models[0].model, '_script_alert_1__/script__img_src_x_onerror_alert_2__');
    const page = await proxy.get('/dashboard');
    assert.match(page.headers['content-security-policy'], /default-src 'none'/);
    assert.ok(!/innerHTML|outerHTML|insertAdjacentHTML|document\.write/.test(page.text),
        'the page writes names as text only');
    const rep = await h.runCli(['report', '--redis', url, '--hours', '2', '--format', 'csv']);
    assert.ok(!/[<>]/.test(rep.stdout), rep.stdout);
    await proxy.stop();
});

h.test('a key of another type under an hour\'s name is noted, and the hours before it are still read', async () => {
    const db = 8;
    const url = env.redis.url.replace(/\/\d+$/, `/${db}`);
    const inDb = (script, ...args) => env.redis.command('EVAL', `redis.call('SELECT', ${db}) ${script}`, ...args);
    const HOUR = 3600 * 1000;
    const bad = h.tallyHourKey(Date.now() - HOUR), older = h.tallyHourKey(Date.now() - 2 * HOUR);
    await inDb("redis.call('SET', KEYS[1], 'a string someone else wrote')", '1', bad);
    await inDb("redis.call('HSET', KEYS[1], 'requests|-|older-hour-model', '4')", '1', older);
    await inDb("redis.call('RPUSH', KEYS[1], 'a list')", '1', 'pc:2:tk');
    const proxy = await env.startProxy({redis: url});
    await proxy.waitReady();
    const d = await h.waitFor(async () => {
        const r = await proxy.get('/dashboard/data?hours=3');
        assert.equal(r.status, 200);
        return r.json.read_ms > 0 && !r.json.reading ? r.json : null;
    }, {timeout: 60000, what: 'a read ended'});
    assert.match(String(d.error), /a key of another type/);
    assert.equal(d.hours[0].requests, 4, `the hour before the foreign key is read: ${JSON.stringify(d.hours)}`);
    assert.equal(d.models.find((m) => m.model === 'older-hour-model').requests, 4);
    assert.equal((await proxy.post(CHAT, h.chatBody(h.uniq('after a foreign key')))).status, 200);
    await proxy.stop();
});

h.test('?hours= too long for its buffer is refused, never read cut short', async () => {
    const ok = await env.proxy.get('/dashboard/data?hours=024');
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.hours_shown, 24);
    /* 16 characters: cut to 15 it read as 2 hours */
    const long = await env.proxy.get('/dashboard/data?hours=0000000000000024');
    assert.equal(long.status, 400, `${long.status} hours_shown ${long.json && long.json.hours_shown}`);
    assert.match(long.json.error.message, /hours must be from 1 to 168/);
});
