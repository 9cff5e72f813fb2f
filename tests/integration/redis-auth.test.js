'use strict';
/*
 * Redis AUTH with an ACL user (Redis 6+) for every Redis client of the
 * process - the worker stores, the semantic index's reader, the prefix
 * index's writer and reader - and for the tools: the user and password in
 * the URL (redis://USER:PASSWORD@...), or redis-user with redis-password
 * from a file or the environment, over TCP and over a unix socket. Redis's
 * own CLIENT LIST shows who connected as whom. A wrong password never fails
 * a request (BYPASS) and never shows in the log.
 */
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./lib');
const {createSemanticMock} = require('../mock/semantic');

const env = h.environment({redis: false, proxy: false});
const CHAT = '/v1/chat/completions';
const USER = 'pcapp';
const PASSWORD = 'acl pw/with@odd:chars';
const ADMIN_PASSWORD = 'admin-only-3c9d';

let redis = null;
let sock = null;
let sem = null;

/* A command as the default user (who has a password now). */
async function admin(...args) {
    const c = await h.RespClient.connect(redis.port);
    try {
        await c.command('AUTH', ADMIN_PASSWORD);
        return await c.command(...args);
    } finally {
        c.close();
    }
}

/* The connections Redis sees from user: all of them, and those on the unix socket (flag U). */
async function connectionsOf(user) {
    const list = (await admin('CLIENT', 'LIST')).split('\n').filter((l) => l.includes(` user=${user} `));
    return {all: list.length, unix: list.filter((l) => / flags=\S*U/.test(l)).length};
}

function semArgs() {
    return ['--semantic', 'yes', '--semantic-max-error', 'off', '--embedder', 'openai', '--embedder-url', sem.url,
        '--embedder-model', 'mock-bow', '--semantic-threshold', '0.9'];
}

function secretFile(text) {
    const file = path.join(h.tmpDir('pc-secret-'), 'secret');
    fs.writeFileSync(file, text);
    fs.chmodSync(file, 0o600);
    return file;
}

/*
 * Every Redis client of the proxy is up: the stores (readyz), the vector
 * reader (in step; it starts with the first embedding, so after a request).
 */
async function allConnected(proxy) {
    await proxy.waitReady(200, 20000);
    await cachesAndHits(proxy);
    await h.waitFor(async () => (await proxy.stats()).semantic_sync_ready === true,
        {timeout: 20000, what: 'the semantic index reader to be in step'});
}

async function cachesAndHits(proxy) {
    const b = h.chatBody(h.uniq('acl'));
    assert.equal((await proxy.post(CHAT, b)).headers['x-cache-status'], 'MISS');
    h.assertHit(await proxy.post(CHAT, b)); /* stored before the miss's answer was sent */
}

h.test('set up: a Redis with an ACL user, on TCP and a unix socket', async () => {
    const dir = h.tmpDir('pc-redis-sock-');
    sock = path.join(dir, 'redis.sock');
    redis = await h.startRedis({args: ['--unixsocket', sock, '--unixsocketperm', '700']});
    /* the user the README suggests: the proxy's keys only, nothing dangerous but ROLE */
    await redis.command('ACL', 'SETUSER', USER, 'on', `>${PASSWORD}`, '~pc:*', '+@all', '-@dangerous', '+role');
    await redis.command('CONFIG', 'SET', 'requirepass', ADMIN_PASSWORD);
    sem = await createSemanticMock().listen();
});

h.test('user and password in the URL: every client of the process authenticates as the user', async () => {
    const url = `redis://${USER}:${encodeURIComponent(PASSWORD)}@127.0.0.1:${redis.port}/0`;
    const proxy = await env.startProxy({redis: url, workers: 2, args: semArgs(), waitReady: false});
    await allConnected(proxy);
    /* 2 stores, the vector reader, the prefix writer (once it has a record) and reader */
    await h.waitFor(async () => (await connectionsOf(USER)).all >= 4,
        {timeout: 10000, what: `connections as ${USER}`});
    const st = await proxy.stats();
    assert.equal(st.prefix_sync_errors, 0, 'the prefix index reader authenticated');
    assert.ok(!proxy.proc.output.includes(PASSWORD) && !proxy.proc.output.includes(encodeURIComponent(PASSWORD)));
    await proxy.stop();
});

h.test('redis-user with the password from the environment, over the unix socket', async () => {
    const proxy = await env.startProxy({redis: `unix:${sock}`, workers: 2, waitReady: false,
        args: [...semArgs(), '--redis-user', USER], env: {PROMPTCACHE_REDIS_PASSWORD: PASSWORD}});
    await allConnected(proxy);
    await h.waitFor(async () => (await connectionsOf(USER)).unix >= 3,
        {timeout: 10000, what: `connections as ${USER} on the unix socket`});
    assert.ok(!proxy.proc.output.includes(PASSWORD));
    await proxy.stop();
});

h.test('the tools authenticate as the user too', async () => {
    const file = secretFile(`${PASSWORD}\n`);
    const auth = ['--redis-user', USER, '--redis-password-file', file];
    const m = await h.runCli(['migrate', '--redis', `unix:${sock}`, ...auth, '--dry-run']);
    assert.equal(m.code, 0, m.output);
    assert.match(m.stdout, /the schema is current/);
    const r = await h.runCli(['report', '--redis', `redis://127.0.0.1:${redis.port}/0`, ...auth,
        '--format', 'json']);
    assert.equal(r.code, 0, r.output);
    await h.waitFor(async () => {
        const j = JSON.parse((await h.runCli(['report', '--redis', `redis://127.0.0.1:${redis.port}/0`,
            ...auth, '--format', 'json'])).stdout);
        return j.total.hits >= 2;
    }, {timeout: 15000, what: 'the report to show the hits'});
    const bad = await h.runCli(['report', '--redis', `redis://${USER}:nope@127.0.0.1:${redis.port}/0`]);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /AUTH failed: WRONGPASS/);
});

h.test('a wrong password: requests bypass the cache, nothing fails, nothing leaks', async () => {
    const proxy = await env.startProxy({redis: `redis://${USER}:wrong-pw-77@127.0.0.1:${redis.port}/0`,
        waitReady: false});
    const r = await proxy.post(CHAT, h.chatBody(h.uniq('no auth')));
    assert.equal(r.status, 200);
    assert.equal(r.headers['x-cache-status'], 'BYPASS');
    assert.equal((await proxy.get('/readyz')).status, 503);
    await h.waitFor(() => /WRONGPASS/.test(proxy.proc.output), {what: 'the AUTH failure in the log'});
    assert.ok(!proxy.proc.output.includes('wrong-pw-77'), 'the password is not logged');
    await proxy.stop();
});

h.test('tear down', async () => {
    if (sem)
        await sem.close();
    if (redis)
        await redis.stop();
});
