'use strict';
/*
 * What an operator reads when Redis goes away: ONE warning when the cache
 * stops working and ONE notice when it works again - per process, whatever
 * the number of workers or of requests in between - for a frozen Redis
 * (SIGSTOP: the connection stays open, commands time out) and for a killed
 * one (connection lost, reconnects refused) alike.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment({proxy: false});

const CHAT = '/v1/chat/completions';
const DOWN = / W redis: the cache is not working \(/g;
const BACK = / N redis: the cache works again \(/g;

const count = (text, re) => (text.match(re) || []).length;

/* Requests over a few prompts while a phase lasts; none may fail. */
function load(proxy, prompts) {
    const state = {stopped: false, results: []};
    state.done = (async () => {
        for (let i = 0; !state.stopped && i < 5000; i++) {
            const r = await proxy.post(CHAT, h.chatBody(prompts[i % prompts.length]));
            state.results.push({status: r.status, cache: r.cache});
        }
    })();
    state.stop = async () => {
        state.stopped = true;
        await state.done;
        return state.results;
    };
    return state;
}

h.test('Redis frozen, then killed: one warning and one notice each time, per process', async () => {
    const proxy = await env.startProxy({workers: 2, logLevel: 'notice', args: ['--redis-timeout', '50']});
    const prompts = [h.uniq('health a'), h.uniq('health b')];
    for (const p of prompts)
        await proxy.post(CHAT, h.chatBody(p));
    const logFrom = proxy.stderr.length;
    const log = () => proxy.stderr.slice(logFrom);
    const traffic = load(proxy, prompts);
    const pid = env.redis.proc.pid;
    try {
        process.kill(pid, 'SIGSTOP');
        await h.waitFor(() => count(log(), DOWN) === 1, {what: 'the warning for the frozen Redis'});
        await proxy.waitReady(503, 10000); /* every worker noticed */
        process.kill(pid, 'SIGCONT');
        await h.waitFor(() => count(log(), BACK) === 1, {timeout: 30000, what: 'the notice after the thaw'});

        await env.redis.kill();
        await h.waitFor(() => count(log(), DOWN) === 2, {what: 'the warning for the killed Redis'});
        await proxy.waitReady(503, 10000);
        await env.redis.restart();
        await h.waitFor(() => count(log(), BACK) === 2, {timeout: 30000, what: 'the notice after the restart'});
        await proxy.waitReady(200, 10000);
    } finally {
        try { process.kill(pid, 'SIGCONT'); } catch (e) { /* already running or gone */ }
        const results = await traffic.stop();
        const failed = results.filter((r) => r.status !== 200);
        assert.deepEqual(failed, [], 'no request failed');
        assert.ok(results.some((r) => r.cache === 'BYPASS'), 'requests bypassed the cache meanwhile');
    }
    const text = log();
    assert.equal(count(text, DOWN), 2, text);
    assert.equal(count(text, BACK), 2, text);
    assert.equal(count(text, / W /g), 2, `no other warnings:\n${text}`);
    assert.equal(count(text, / E /g), 0, text);
    assert.match(text, /not working \([^)]*no reply for \d+ ms/, 'the frozen Redis: commands stalled');
});
