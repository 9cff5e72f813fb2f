#!/usr/bin/env node
'use strict';
/*
 * bench/embedder-stall.js - what a stalled remote embedder costs a miss.
 * Three proxies in one run, each asked N distinct questions one at a time
 * (every one a miss that goes to the mock upstream and is stored):
 *
 *   off       semantic no: the baseline
 *   breaker   semantic yes, embedder openai pointed at a server that
 *             accepts connections and never answers; measured once the
 *             circuit breaker has opened (the default settings)
 *   none      the same with embedder-breaker-failures 0 (no breaker):
 *             every lookup waits embedder-timeout
 *
 * Prints a line per case and a final JSON line with p50/p90 in ms and the
 * ratios to the baseline. On demand only; the numbers depend on the machine.
 *
 *   PROMPTCACHE_BIN=build/promptcache node bench/embedder-stall.js
 *   N=200 N_SLOW=20 node bench/embedder-stall.js
 */
const net = require('node:net');
const h = require('../tests/integration/lib');

const N = Number(process.env.N || 200);
const N_SLOW = Number(process.env.N_SLOW || 20); /* each takes embedder-timeout */

/* Accepts connections and reads what comes; never answers. */
function stalledEmbedder() {
    const sockets = new Set();
    const server = net.createServer((s) => {
        sockets.add(s);
        s.on('close', () => sockets.delete(s));
        s.on('error', () => {});
        s.resume();
    });
    return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({
        url: `http://127.0.0.1:${server.address().port}`,
        close: () => {
            for (const s of sockets)
                s.destroy();
            return new Promise((r) => server.close(() => r()));
        },
    })));
}

function quantile(sorted, q) {
    return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

/* n distinct questions, one at a time; latencies in ms, sorted. */
async function misses(proxy, n, label) {
    const ms = [];
    for (let i = 0; i < n; i++) {
        const t0 = process.hrtime.bigint();
        const r = await proxy.post('/v1/chat/completions', h.chatBody(`${label} question ${i} ${h.uniq('b')}`));
        ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
        if (r.status !== 200 || r.headers['x-cache-status'] !== 'MISS')
            throw new Error(`${label}: ${r.status} ${r.headers['x-cache-status']}`);
    }
    return ms.sort((a, b) => a - b);
}

async function main() {
    const mock = await h.startMock();
    const redis = await h.startRedis();
    const emb = await stalledEmbedder();
    const sem = ['--semantic', 'yes', '--semantic-max-error', 'off', '--embedder', 'openai', '--embedder-url', emb.url,
        '--embedder-model', 'stalled'];
    const cases = [
        {name: 'off', args: ['--semantic', 'no'], n: N},
        {name: 'breaker', args: sem, n: N},
        {name: 'none', args: [...sem, '--embedder-breaker-failures', '0'], n: N_SLOW},
    ];
    const out = {n: N, n_slow: N_SLOW};
    try {
        for (const c of cases) {
            const proxy = await h.startProxy({mock, redis, logLevel: 'notice', args: ['--access-log', 'off', ...c.args]});
            await proxy.waitReady();
            if (c.name === 'breaker') /* until it opens: those misses pay embedder-timeout */
                await h.waitFor(async () => {
                    await misses(proxy, 1, 'warm');
                    return (await proxy.stats()).embedder_breaker === 'open';
                }, {timeout: 30000, what: 'the breaker to open'});
            const ms = await misses(proxy, c.n, c.name);
            out[c.name] = {p50_ms: +quantile(ms, 0.5).toFixed(2), p90_ms: +quantile(ms, 0.9).toFixed(2)};
            console.log(`${c.name}: ${c.n} misses, p50 ${out[c.name].p50_ms} ms, p90 ${out[c.name].p90_ms} ms`);
            await proxy.stop(10000);
        }
        for (const k of ['breaker', 'none'])
            out[`${k}_p50_ratio`] = +(out[k].p50_ms / out.off.p50_ms).toFixed(2);
        console.log(JSON.stringify(out));
    } finally {
        await emb.close();
        await mock.close();
        await redis.stop();
    }
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});
