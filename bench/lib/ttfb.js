#!/usr/bin/env node
'use strict';
/*
 * bench/lib/ttfb.js - part of bench/run: streamed chat completions, one at a
 * time on a keep-alive connection, alternating between the upstream called
 * directly and the same upstream through promptcache, every body unique (so
 * each proxied one is a MISS relayed as it arrives). Per request: time to the
 * response head, to the first body byte (the first SSE event) and to the end;
 * per event, its delivery time: the mock stamps each event with the
 * machine's monotonic clock as it writes it (x-mock-stamp), the client reads
 * the same clock when the bytes arrive, so an event's added time through the
 * proxy is measured without the mock's timer jitter; and the tail, from the
 * last event to the end of the response.
 *
 *   node bench/lib/ttfb.js --direct http://127.0.0.1:M --proxy http://127.0.0.1:P --n 2000
 *       [--chunks 8] [--chunk-delay-ms 1]
 * --n requests to each. Last line: one JSON object, milliseconds.
 */
const http = require('node:http');
const {performance} = require('node:perf_hooks');

function parseArgs(argv) {
    const o = {direct: null, proxy: null, n: 2000, chunks: 8, 'chunk-delay-ms': 1, warmup: 50};
    for (let i = 0; i < argv.length; i += 2) {
        const k = argv[i].replace(/^--/, ''), v = argv[i + 1];
        if (!(k in o)) throw new Error(`unknown option ${argv[i]}`);
        o[k] = typeof o[k] === 'number' ? Number(v) : v;
    }
    if (!o.direct || !o.proxy) throw new Error('--direct and --proxy are required');
    return o;
}

const salt = `${process.pid}-${Date.now()}`;

function stream(base, agent, i, o) {
    const data = Buffer.from(JSON.stringify({model: 'gpt-4o-mini', stream: true,
        messages: [{role: 'user', content: `Stream ${salt}-${i}: tell me about the weather.`}]}));
    return new Promise((resolve, reject) => {
        const t0 = performance.now();
        let head = 0, first = 0, last = 0, carry = '';
        const chunks = [];
        const req = http.request(base + '/v1/chat/completions', {method: 'POST', agent, headers: {
            'content-type': 'application/json', 'content-length': data.length,
            authorization: 'Bearer sk-bench-stream', 'x-mock-chunks': String(o.chunks),
            'x-mock-chunk-delay-ms': String(o['chunk-delay-ms']), 'x-mock-stamp': '1'}}, (res) => {
            head = performance.now() - t0;
            res.on('data', (d) => {
                const now = process.hrtime.bigint();
                if (!first) first = performance.now() - t0;
                carry += d.toString('latin1');
                const re = /: t=(\d+)\n/g;
                let m, end = 0;
                while ((m = re.exec(carry)) !== null) {
                    chunks.push(Number(now - BigInt(m[1])) / 1e6);
                    end = re.lastIndex;
                    last = performance.now();
                }
                carry = carry.slice(Math.max(end, carry.length - 64)); /* a stamp cut in two */
            });
            res.on('end', () => resolve({status: res.statusCode, cache: res.headers['x-cache-status'],
                head, first, total: performance.now() - t0, chunks,
                tail: last ? performance.now() - last : 0}));
        });
        req.on('error', reject);
        req.end(data);
    });
}

function pct(xs, p) {
    const s = [...xs].sort((a, b) => a - b);
    return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : null;
}

async function main() {
    const o = parseArgs(process.argv.slice(2));
    const agents = {direct: new http.Agent({keepAlive: true, maxSockets: 1}),
        proxy: new http.Agent({keepAlive: true, maxSockets: 1})};
    const samples = {direct: {head: [], first: [], total: [], chunk: [], tail: []},
        proxy: {head: [], first: [], total: [], chunk: [], tail: []}};
    let misses = 0, bad = 0;
    for (let i = -o.warmup; i < o.n; i++) {
        /* alternate which goes first, so neither always follows the other */
        const order = i % 2 ? ['direct', 'proxy'] : ['proxy', 'direct'];
        for (const who of order) {
            const r = await stream(o[who], agents[who], `${who}-${i}`, o);
            if (r.status !== 200) bad++;
            if (i < 0) continue;
            if (who === 'proxy' && r.cache === 'MISS') misses++;
            for (const k of ['head', 'first', 'total', 'tail']) samples[who][k].push(r[k]);
            if (r.chunks.length < o.chunks) bad++; /* the content pieces at least, all stamped */
            samples[who].chunk.push(...r.chunks);
        }
    }
    agents.direct.destroy();
    agents.proxy.destroy();
    const fig = (who, k) => ({p50: Number(pct(samples[who][k], 0.5).toFixed(3)),
        p99: Number(pct(samples[who][k], 0.99).toFixed(3))});
    const out = {n: o.n, chunks: o.chunks, chunk_delay_ms: o['chunk-delay-ms'], proxy_misses: misses, errors: bad};
    for (const who of ['direct', 'proxy'])
        for (const k of ['head', 'first', 'total', 'chunk', 'tail'])
            out[`${who}_${k}`] = fig(who, k);
    console.log(JSON.stringify(out));
}

main().catch((e) => {
    console.error(e.stack || String(e));
    process.exit(1);
});
