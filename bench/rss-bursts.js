#!/usr/bin/env node
'use strict';
/*
 * bench/rss-bursts.js - the proxy's memory after bursts of large request
 * bodies: BURSTS bursts of N concurrent POSTs of SIZE_MB each (chat requests
 * with one long message, to the mock upstream, cache on), then the proxy's
 * resident memory once it is idle again (IDLE_MS after the burst: the
 * memory trim runs about a second after the last large body is freed).
 * The proxy runs with max-request-memory BUDGET_MB if given (else its
 * default, auto: 512 MiB for the default max-body-size of 16m; a binary older
 * than the key runs that way too); each burst's factor is its peak memory
 * above the idle proxy's over that budget: how well the budget bounds it.
 * BODY=values sends bodies of many small JSON values instead of one long
 * text (a "stop" array of numbers: a parse tree far larger than the body).
 * PROXY_ARGS adds options ("--semantic yes").
 * Prints one line per burst and a final JSON line. On demand only; the
 * numbers depend on the machine and the allocator.
 *
 *   PROMPTCACHE_BIN=build/promptcache node bench/rss-bursts.js
 *   BURSTS=2 N=60 SIZE_MB=15 WORKERS=2 IDLE_MS=3000 BUDGET_MB=512 BODY=text node bench/rss-bursts.js
 */
const fs = require('node:fs');
const http = require('node:http');
const h = require('../tests/integration/lib');

const BURSTS = Number(process.env.BURSTS || 2);
const N = Number(process.env.N || 60);
const SIZE_MB = Number(process.env.SIZE_MB || 15);
const WORKERS = Number(process.env.WORKERS || 2);
const IDLE_MS = Number(process.env.IDLE_MS || 3000);
const BUDGET_MB = Number(process.env.BUDGET_MB || 0);
const BUDGET = BUDGET_MB || 512; /* auto: 32 x max-body-size (16 MiB) */
const BODY = process.env.BODY || 'text';
const PROXY_ARGS = (process.env.PROXY_ARGS || '').split(/\s+/).filter(Boolean);

/* VmRSS and VmHWM (peak) of pid, in MiB. */
function memory(pid) {
    const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (name) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)[1]);
    return {rss: kb('VmRSS') / 1024, peak: kb('VmHWM') / 1024};
}

/* A chat request of about SIZE_MB: one long message, or (BODY=values) a long array of 0s. */
function requestBody(i, burst) {
    const text = `burst ${burst} request ${i} `;
    if (BODY === 'values') {
        const stop = `[${'0,'.repeat((SIZE_MB << 20) / 2 - 1)}0]`;
        return Buffer.from(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"${text}"}],` +
            `"logit_bias_bench":${stop}}`);
    }
    return Buffer.from(JSON.stringify({
        model: 'gpt-4o-mini',
        messages: [{role: 'user', content: text + 'x'.repeat(SIZE_MB << 20)}],
    }));
}

/* One POST of a SIZE_MB body; resolves with the status (0 if the connection failed). */
function post(port, i, burst) {
    const body = requestBody(i, burst);
    return new Promise((resolve) => {
        const req = http.request({host: '127.0.0.1', port, path: '/v1/chat/completions', method: 'POST',
            agent: false, headers: {'content-type': 'application/json', 'content-length': body.length,
                authorization: 'Bearer sk-bench'}}, (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode));
        });
        req.on('error', () => resolve(0));
        req.end(body);
    });
}

async function main() {
    const mock = await h.startMock();
    const redis = await h.startRedis();
    const proxy = await h.startProxy({mock, redis, workers: WORKERS, logLevel: 'notice',
        args: ['--access-log', 'off', ...(BUDGET_MB ? ['--max-request-memory', `${BUDGET_MB}m`] : []), ...PROXY_ARGS]});
    await proxy.waitReady();
    const rows = [];
    try {
        const start = memory(proxy.pid);
        console.log(`start: rss ${start.rss.toFixed(1)} MiB`);
        for (let b = 1; b <= BURSTS; b++) {
            const statuses = await Promise.all(Array.from({length: N}, (_, i) => post(proxy.port, i, b)));
            const during = memory(proxy.pid);
            await h.sleep(IDLE_MS); /* the idle time is what is measured */
            const idle = memory(proxy.pid);
            const count = {};
            statuses.forEach((s) => { count[s] = (count[s] || 0) + 1; });
            /* VmHWM is the process's peak so far: a burst's factor is read against the budget. */
            const factor = (during.peak - start.rss) / BUDGET;
            rows.push({burst: b, statuses: count, peak_mib: Math.round(during.peak),
                rss_after_mib: Math.round(during.rss), rss_idle_mib: Math.round(idle.rss),
                factor: Number(factor.toFixed(2))});
            console.log(`burst ${b}: ${N} x ${SIZE_MB} MB -> ${JSON.stringify(count)}; peak ` +
                `${during.peak.toFixed(0)} MiB, rss at the end ${during.rss.toFixed(0)} MiB, ` +
                `idle ${IDLE_MS} ms later ${idle.rss.toFixed(1)} MiB; (peak - start) / ` +
                `max-request-memory ${BUDGET} MiB = ${factor.toFixed(2)}`);
        }
        const stats = await proxy.stats();
        console.log(JSON.stringify({n: N, size_mb: SIZE_MB, body: BODY, workers: WORKERS, budget_mib: BUDGET,
            start_mib: Math.round(start.rss), bursts: rows,
            factor: Math.max(...rows.map((r) => r.factor)), memory_trims: stats.memory_trims,
            requests_over_body_budget: stats.requests_over_body_budget}));
    } finally {
        await proxy.stop(10000);
        await mock.close();
        await redis.stop();
    }
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});
