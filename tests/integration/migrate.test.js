'use strict';
/*
 * `promptcache migrate --redis URL [--dry-run]`: a dry run lists the pending
 * migrations and changes nothing; a real run applies them (pc:schema set to
 * the latest version) and is idempotent.
 */
const assert = require('node:assert/strict');
const net = require('node:net');
const h = require('./lib');
const {startDribbler} = require('./lib/dribble');
const {startRespFault, FLOOD_LIMIT} = require('./lib/resp-fault');

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

h.test('the tools say a server that never answers timed out (not "Resource temporarily unavailable")', async () => {
    /* Accepts and reads, never answers: as a Redis, a sentinel or a cluster node. */
    const silent = net.createServer((c) => c.on('error', () => {}));
    await new Promise((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const at = `127.0.0.1:${silent.address().port}`;
    try {
        for (const args of [['migrate', '--redis', `redis://${at}/0`],
            ['report', '--redis', `redis://${at}/0`],
            ['migrate', '--redis', `sentinel://${at}/mymaster`],
            ['report', '--redis', `cluster://${at}`]]) {
            const r = await h.runCli([...args, '--redis-timeout', '100']);
            assert.notEqual(r.code, 0, r.output);
            assert.match(r.stderr, /timed out \(no reply in time\)/, `${args.join(' ')}:\n${r.output}`);
            assert.doesNotMatch(r.stderr, /Resource temporarily unavailable/);
        }
    } finally {
        silent.close();
    }
});

/*
 * A server that answers a byte at a time, each byte well within the timeout of one read (400 ms
 * of 1 s), as a Redis or a cluster node: hiredis 0.14 bounds each read only, and the tools read
 * on for as long as bytes came (each reply here takes minutes). A reply must come whole within
 * redis-timeout (at least 1 s): the tools give up and say so.
 */
h.test('the tools give up on a server that answers a byte at a time, and say it timed out', {timeout: 90000}, async () => {
    const d = await startDribbler({everyMs: 400});
    try {
        for (const args of [['migrate', '--redis', `redis://${d.at}/0`],
            ['report', '--redis', `redis://${d.at}/0`],
            ['purge', '--all', '--redis', `redis://${d.at}/0`],
            ['report', '--redis', `cluster://${d.at}`]]) {
            const r = await h.runCli([...args, '--redis-timeout', '1000'], {timeout: 25000});
            assert.equal(r.code, 1, `${args.join(' ')}:\n${r.output}`);
            assert.match(r.stderr, /timed out \(no reply in time\): no whole reply within 1000 ms/, `${args.join(' ')}:\n${r.output}`);
        }
        await h.waitFor(() => d.gaveUp() >= 4, {timeout: 5000, what: 'the tools to hang up'});
    } finally {
        await d.close();
    }
});

h.test('migration 0002 moves schema-1 entries and report counters to hash-tagged keys', async () => {
    await env.redis.command('FLUSHALL');
    /* A store as schema 1 left it: one entry with a TTL, one hour of counters. */
    await env.redis.command('SET', 'pc:schema', '1');
    await env.redis.command('HSET', 'pc:meta', 'created_at', '1');
    const tenant = '0123456789abcdef', key = 'ab'.repeat(32);
    await env.redis.command('SET', `pc:1:e:${tenant}:${key}`, 'entry-bytes', 'EX', '5000');
    await env.redis.command('HSET', 'pc:1:r:2026120215', 'requests|t|m', '7');
    const r = await h.runCli(['migrate', '--redis', env.redis.url]);
    assert.equal(r.code, 0, r.output);
    assert.match(r.output, /applied 0002/);
    assert.equal(await env.redis.command('GET', 'pc:schema'), String(h.latestSchemaVersion()));
    const moved = `pc:2:e:{${tenant}:${key}}`;
    assert.equal(await env.redis.command('GET', moved), 'entry-bytes');
    const ttl = Number(await env.redis.command('TTL', moved));
    assert.ok(ttl > 4000 && ttl <= 5000, `TTL kept: ${ttl}`);
    assert.equal(await env.redis.command('HGET', 'pc:2:r:2026120215', 'requests|t|m'), '7');
    assert.deepEqual(await env.redis.keys('pc:1:*'), [], 'no schema-1 keys left');
});

/*
 * A migration's EVAL was read with hiredis' own redisCommandArgv: no cap on a reply that
 * keeps coming (hiredis 0.14 buffers a bulk of any announced length) and no deadline for the
 * whole of it. It is read as every other blocking reply: past 64 MiB the tool gives up. The
 * relay sends at most 256 MiB, then nothing: read whole, that was 256 MiB and a 60 s wait.
 */
h.test('a migration whose EVAL is answered by an endless bulk: migrate gives up before it fills the memory', {timeout: 90000}, async () => {
    await env.redis.command('FLUSHALL');
    const fault = await startRespFault(env.redis.port);
    try {
        fault.set('flood', {only: ['EVAL']});
        const r = await h.runCli(['migrate', '--redis', fault.url], {timeout: 40000});
        assert.equal(r.code, 1, r.output);
        assert.match(r.stderr, /migration 0001 initial: a reply larger than 67108864 bytes/, r.output);
        await h.waitFor(() => fault.floods().length === 1 && fault.floods()[0].closed,
            {timeout: 5000, what: 'migrate to hang up'});
        const f = fault.floods()[0];
        assert.ok(f.sent < FLOOD_LIMIT, `migrate read all ${f.sent} bytes the relay sent`);
    } finally {
        await fault.close();
        await env.redis.command('FLUSHALL');
    }
});
