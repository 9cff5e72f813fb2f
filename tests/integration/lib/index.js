'use strict';
/*
 * The integration-test harness: real promptcache binary, real redis-server,
 * in-process mock upstream. A test file typically does
 *
 *   const h = require('./lib');
 *   const env = h.environment();          // redis + mock + proxy for this file
 *   h.test('...', async () => { const r = await env.proxy.post(path, body); ... });
 *
 * environment() registers before/after hooks that start and always stop the
 * processes; h.test() wraps node:test so that a failing (or hung) test prints
 * the output of the processes involved.
 */
const nodeTest = require('node:test');
const {createMock} = require('../../mock/upstream');
const procs = require('./procs');
const wait = require('./wait');
const redis = require('./redis');
const http = require('./http');
const sse = require('./sse');
const proxy = require('./proxy');
const fixtures = require('./fixtures');
const raw = require('./raw');
const relay = require('./relay');
const expect = require('./expect');

const DEFAULT_TEST_TIMEOUT = 60000;

function startMock() {
    return createMock().listen(0, '127.0.0.1');
}

/*
 * Print what the processes said since `since`: the first thing to read when a
 * test fails. Not for a missing binary: its message says all there is.
 */
function reportFailure(since, what, err) {
    if (err && err.code === 'PC_NO_BINARY')
        return;
    const logs = procs.describeProcs(since);
    if (logs)
        process.stderr.write(`\n===== ${what} failed; process output follows =====\n${logs}\n`);
}

/*
 * node:test's test() with a default deadline, and process output printed on
 * failure. The deadline is ours (not only node's) so that a hung test still
 * reports the logs.
 */
function test(name, opts, fn) {
    if (typeof opts === 'function')
        [fn, opts] = [opts, {}];
    const timeout = opts.timeout || DEFAULT_TEST_TIMEOUT;
    return nodeTest.test(name, {...opts, timeout: timeout + 5000}, async (t) => {
        const since = Date.now();
        try {
            await wait.withDeadline(Promise.resolve().then(() => fn(t)), timeout, `test "${name}"`);
        } catch (e) {
            reportFailure(since, `test "${name}"`, e);
            throw e;
        }
    });
}

/*
 * Processes for one test file: a mock, a redis-server (redis: false to skip)
 * and a proxy (proxy: false to skip; proxyArgs: extra options). env.startProxy()
 * starts further proxies that are stopped with the rest. Fields are filled in
 * by the before hook.
 */
function environment({redis: wantRedis = true, proxy: wantProxy = true, proxyArgs = [], proxyOpts = {}} = {}) {
    const env = {mock: null, redis: null, proxy: null, proxies: []};
    env.startProxy = async (opts = {}) => {
        const p = await proxy.startProxy({mock: env.mock, redis: env.redis, ...opts});
        env.proxies.push(p);
        /* With the file's own running Redis, tests expect the cache to work from the first request. */
        if (opts.redis === undefined && env.redis && opts.waitReady !== false)
            await p.waitReady();
        return p;
    };
    nodeTest.before(async () => {
        const since = Date.now();
        try {
            env.mock = await startMock();
            if (wantRedis)
                env.redis = await redis.startRedis();
            if (wantProxy) {
                env.proxy = await env.startProxy({args: proxyArgs, ...proxyOpts});
                if (wantRedis)
                    await env.proxy.waitReady();
            }
        } catch (e) {
            reportFailure(since, 'setup', e);
            throw e;
        }
    }, {timeout: 60000});
    nodeTest.after(async () => {
        await Promise.all(env.proxies.map((p) => p.stop(5000)));
        if (env.mock)
            await env.mock.close();
        if (env.redis)
            await env.redis.stop();
    }, {timeout: 60000});
    return env;
}

module.exports = {
    test, environment, startMock, reportFailure,
    ...wait, ...redis, ...http, ...sse, ...proxy, ...fixtures, ...expect, ...raw, ...relay,
    describeProcs: procs.describeProcs, tmpDir: procs.tmpDir, spawnTracked: procs.spawnTracked,
};
