'use strict';
/*
 * `promptcache migrate --redis URL [--dry-run]`: a dry run lists the pending
 * migrations and changes nothing; a real run applies them (pc:schema set to
 * the latest version) and is idempotent.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment({proxy: false});

h.test('migrate --dry-run lists pending migrations and changes nothing', async () => {
    const r = await h.runCli(['migrate', '--redis', env.redis.url, '--dry-run']);
    assert.equal(r.code, 0, r.output);
    assert.match(r.output, /initial/, 'the pending migration is named');
    assert.equal(await env.redis.command('GET', 'pc:schema'), null, 'no schema version written');
    assert.deepEqual(await env.redis.keys('pc:*'), [], 'no keys written');
});

h.test('migrate applies the migrations', async () => {
    const r = await h.runCli(['migrate', '--redis', env.redis.url]);
    assert.equal(r.code, 0, r.output);
    assert.equal(await env.redis.command('GET', 'pc:schema'), String(h.latestSchemaVersion()));
    const meta = await env.redis.command('HGETALL', 'pc:meta');
    assert.ok(meta.includes('created_at'), `pc:meta: ${meta}`);
});

h.test('migrate again is a no-op that succeeds', async () => {
    const before = await env.redis.command('HGETALL', 'pc:meta');
    const r = await h.runCli(['migrate', '--redis', env.redis.url]);
    assert.equal(r.code, 0, r.output);
    assert.equal(await env.redis.command('GET', 'pc:schema'), String(h.latestSchemaVersion()));
    assert.deepEqual(await env.redis.command('HGETALL', 'pc:meta'), before);
});

h.test('migrate --dry-run on an up-to-date store succeeds', async () => {
    const r = await h.runCli(['migrate', '--redis', env.redis.url, '--dry-run']);
    assert.equal(r.code, 0, r.output);
});

h.test('migrate against an unreachable Redis fails', async () => {
    const port = await h.freePort();
    const r = await h.runCli(['migrate', '--redis', `redis://127.0.0.1:${port}/0`]);
    assert.notEqual(r.code, 0);
    assert.ok(r.output.length > 0, 'with a message');
});

