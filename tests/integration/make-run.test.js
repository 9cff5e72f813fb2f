'use strict';
/*
 * `make run`'s main job, tools/run.sh, with UPSTREAM=mock (the project's
 * mock upstream: no API key): the proxy answers, and its private Redis keeps
 * the cache across a restart (the second run's first request is a HIT read
 * from Redis). The word vectors are not fetched for a configuration that
 * does not use them (semantic no).
 */
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./lib');

const RUN = path.join(h.REPO, 'tools', 'run.sh');
const CHAT = '/v1/chat/completions';
const varDir = h.tmpDir('pc-make-run-');
let port = 0;

function start() {
    return h.spawnTracked('tools/run.sh', 'bash', [RUN], {
        detached: true, /* its own process group: stopped as a user's Ctrl-C would */
        env: {...process.env, UPSTREAM: 'mock', LISTEN: `127.0.0.1:${port}`, RUN_VAR: varDir,
            PROMPTCACHE_BIN: h.proxyBin(), PROMPTCACHE_ARGS: '--log-level info'},
    });
}

async function stop(proc) {
    try {
        process.kill(-proc.pid, 'SIGINT');
    } catch (e) { /* already gone */ }
    assert.ok(await proc.waitExit(20000), 'run.sh exits after Ctrl-C');
}

async function ready(proc) {
    const url = `http://127.0.0.1:${port}`;
    await h.waitFor(async () => {
        if (!proc.alive)
            throw new Error(`run.sh exited:\n${proc.tail(30)}`);
        try {
            return (await h.request(url, {method: 'GET', path: '/readyz'})).status === 200;
        } catch (e) {
            return false;
        }
    }, {timeout: 30000, what: 'the proxy of run.sh ready'});
    return url;
}

function ask(url, body) {
    return h.request(url, {method: 'POST', path: CHAT, body: JSON.stringify(body),
        headers: {'content-type': 'application/json', authorization: 'Bearer sk-anything'}});
}

h.test('UPSTREAM=mock answers without an API key, and the cache survives a restart', async () => {
    port = await h.freePort();
    const body = h.chatBody(h.uniq('make run persists'));
    let proc = start();
    try {
        const url = await ready(proc);
        assert.match(proc.output, /the mock upstream \(http:\/\/127\.0\.0\.1:\d+: OpenAI and Anthropic/);
        assert.doesNotMatch(proc.output, /npm pack|wordvec/, 'no word vectors for semantic no');
        const miss = await ask(url, body);
        assert.equal(miss.status, 200, miss.text);
        assert.equal(miss.headers['x-cache-status'], 'MISS');
        assert.match(JSON.parse(miss.text).choices[0].message.content, /mock answer/);
        assert.equal((await ask(url, body)).headers['x-cache-status'], 'HIT');
    } finally {
        await stop(proc);
    }
    assert.ok(!fs.existsSync(path.join(varDir, 'redis.sock')), 'the private Redis stopped');
    assert.ok(fs.existsSync(path.join(varDir, 'dump.rdb')), 'and kept its data');

    proc = start();
    try {
        const url = await ready(proc);
        const again = await ask(url, body);
        assert.equal(again.headers['x-cache-status'], 'HIT', 'read from the Redis of the first run');
        assert.equal(again.headers['x-cache-match'], 'exact');
    } finally {
        await stop(proc);
    }
});

h.test('a port already taken is said before anything starts, and run.sh exits 1', async () => {
    /*
     * run.sh started the private Redis and the mock and printed "promptcache on http://...
     * Point a client at it" before the proxy found the port taken, so the last words a user
     * read before the error told them to send requests to whatever held the port.
     */
    const net = require('node:net');
    const other = net.createServer((s) => s.destroy());
    await new Promise((resolve) => other.listen(0, '127.0.0.1', resolve));
    port = other.address().port;
    const dir = h.tmpDir('pc-make-run-taken-');
    try {
        const proc = h.spawnTracked('tools/run.sh', 'bash', [RUN], {
            env: {...process.env, UPSTREAM: 'mock', LISTEN: `127.0.0.1:${port}`, RUN_VAR: dir,
                PROMPTCACHE_BIN: h.proxyBin()},
        });
        assert.ok(await proc.waitExit(20000), 'run.sh exits');
        assert.equal(proc.exitStatus(), 1, 'exit code');
        assert.match(proc.output, new RegExp(`already listens on 127\\.0\\.0\\.1:${port}`));
        assert.doesNotMatch(proc.output, /Point a client at it/);
        assert.ok(!fs.existsSync(path.join(dir, 'redis.sock')), 'no private Redis started');
    } finally {
        other.close();
    }
});

h.test('Ctrl-C lets a request in flight to the mock finish', async () => {
    /*
     * README: "Ctrl-C: in-flight requests finish first". The terminal's SIGINT reached the mock
     * upstream too (same process group), which died at once: the proxy drained, but the request
     * it waited for got a 502 from a dead upstream. The mock now runs in a session of its own.
     */
    port = await h.freePort();
    const proc = start();
    try {
        const url = await ready(proc);
        const pending = h.request(url, {method: 'POST', path: CHAT,
            body: JSON.stringify(h.chatBody(h.uniq('make run ctrl-c'))),
            headers: {'content-type': 'application/json', 'authorization': 'Bearer sk-anything',
                'x-mock-delay-ms': '1500'}});
        await h.waitFor(async () => (await h.request(url, {method: 'GET', path: '/stats'})).json.cache_misses >= 1,
            {what: 'the request in flight'});
        process.kill(-proc.pid, 'SIGINT');
        const r = await pending;
        assert.equal(r.status, 200, r.text);
        assert.match(JSON.parse(r.text).choices[0].message.content, /mock answer/);
    } finally {
        await stop(proc);
    }
    /* and the mock is stopped once run.sh is done */
    const m = /listening (127\.0\.0\.1:\d+)/.exec(fs.readFileSync(path.join(varDir, 'mock-upstream.out'), 'utf8'));
    assert.ok(m, 'the mock said where it listens');
    await h.waitFor(async () => {
        try {
            await h.request(`http://${m[1]}`, {method: 'GET', path: '/v1/models'});
            return false;
        } catch (e) {
            return true;
        }
    }, {what: 'the mock upstream stopped'});
});
