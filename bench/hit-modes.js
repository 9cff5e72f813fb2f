#!/usr/bin/env node
'use strict';
/*
 * bench/hit-modes.js - what a cache hit costs per endpoint and delivery mode:
 * an answer stored as JSON or as its SSE recording, served to a JSON or a
 * stream client (byte copy, synthesis of a stream, assembly of a JSON
 * answer, replay of the recording). For each case, N sequential hits on one
 * keep-alive connection (after WARMUP untimed ones, so that the order of
 * the cases does not matter): p50/p99 latency seen by the client and the bytes
 * sent; and, per endpoint, the bytes of the stored entry and of its section
 * of replayed headers. On demand only; the figures depend on the machine.
 *
 *   PROMPTCACHE_BIN=build/promptcache node bench/hit-modes.js
 *   N=2000 SIZE=4096 ONLY=responses node bench/hit-modes.js
 */
const http = require('node:http');
const h = require('../tests/integration/lib');

const N = Number(process.env.N || 1000);
const SIZE = Number(process.env.SIZE || 4096); /* bytes of answer text */
const WARMUP = Number(process.env.WARMUP || 300); /* hits per case before the timed ones */
const ONLY = new RegExp(process.env.ONLY || ''); /* the cases whose name matches */

const CASES = [
    {name: 'chat json->json', path: '/v1/chat/completions', store: false, ask: false},
    {name: 'chat json->stream', path: '/v1/chat/completions', store: false, ask: true},
    {name: 'chat sse->json', path: '/v1/chat/completions', store: true, ask: false},
    {name: 'chat sse->stream', path: '/v1/chat/completions', store: true, ask: true},
    {name: 'responses json->json', path: '/v1/responses', store: false, ask: false},
    {name: 'responses json->stream', path: '/v1/responses', store: false, ask: true},
    {name: 'responses sse->json', path: '/v1/responses', store: true, ask: false},
    {name: 'responses sse->stream', path: '/v1/responses', store: true, ask: true},
    {name: 'messages sse->stream', path: '/v1/messages', store: true, ask: true},
    {name: 'embeddings base64', path: '/v1/embeddings', store: false, ask: false},
];

function body(path, q, stream) {
    if (path === '/v1/responses')
        return {model: 'gpt-4.1-mini', input: q, stream};
    if (path === '/v1/messages')
        return {model: 'claude-sonnet-4-5', max_tokens: 4096, messages: [{role: 'user', content: q}], stream};
    if (path === '/v1/embeddings')
        return {model: 'text-embedding-3-small', input: [q, `${q} 2`], encoding_format: 'base64'};
    return {model: 'gpt-4o-mini', messages: [{role: 'user', content: q}], stream};
}

const agent = new http.Agent({keepAlive: true, maxSockets: 1});

/* key: the credential, one per case, so that each case's entry is its tenant's only one. */
function post(port, path, payload, key, extra = {}) {
    const data = Buffer.from(JSON.stringify(payload));
    const headers = {'content-type': 'application/json', 'content-length': data.length, ...extra,
        ...(path === '/v1/messages' ? {'x-api-key': key, 'anthropic-version': '2023-06-01'}
            : {authorization: `Bearer ${key}`})};
    const t0 = process.hrtime.bigint();
    return new Promise((resolve, reject) => {
        const req = http.request({host: '127.0.0.1', port, path, method: 'POST', agent, headers}, (res) => {
            let bytes = 0;
            res.on('data', (c) => (bytes += c.length));
            res.on('end', () => resolve({status: res.statusCode, cache: res.headers['x-cache-status'], bytes,
                ms: Number(process.hrtime.bigint() - t0) / 1e6, id: res.headers['x-promptcache-request-id']}));
        });
        req.on('error', reject);
        req.end(data);
    });
}

const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];

/* Bytes of an entry and of what follows its body (the sections), per src/entry.c. */
const SIZES = `
local v = redis.call('GET', KEYS[1])
local function u(off, n) local x = 0 for i = n - 1, 0, -1 do x = x * 256 + string.byte(v, off + i + 1) end return x end
local ct = u(45, 2)
return {#v, #v - (47 + ct + 4 + u(47 + ct, 4))}`;

async function entrySizes(redis, proxy, id) {
    const line = await proxy.waitAccessLog((l) => l.id === id);
    const keys = await redis.keys(`pc:*:e:{${line.tenant}:*`);
    if (keys.length !== 1)
        throw new Error(`expected one entry for tenant ${line.tenant}, found ${keys.length}`);
    return redis.command('EVAL', SIZES, 1, keys[0]);
}

async function main() {
    const mock = await h.startMock();
    const redis = await h.startRedis();
    const proxy = await h.startProxy({mock, redis, workers: 2, logLevel: 'notice'});
    await proxy.waitReady();
    const rows = [];
    try {
        for (const [i, c] of CASES.entries()) {
            if (!ONLY.test(c.name))
                continue;
            const q = h.uniq(c.name);
            const key = `sk-bench-${i}-${q.split(' ').pop()}`;
            const miss = await post(proxy.port, c.path, body(c.path, q, c.store), key, {'x-mock-size': String(SIZE)});
            const ask = body(c.path, q, c.ask);
            const times = [];
            let bytes = 0;
            for (let i = 0; i < WARMUP + N; i++) {
                const r = await post(proxy.port, c.path, ask, key);
                if (r.cache !== 'HIT')
                    throw new Error(`${c.name}: ${r.status} ${r.cache}`);
                if (i >= WARMUP)
                    times.push(r.ms);
                bytes = r.bytes;
            }
            times.sort((a, b) => a - b);
            const [entry, sections] = await entrySizes(redis, proxy, miss.id);
            const row = {case: c.name, n: N, p50_ms: +pct(times, 0.5).toFixed(3), p99_ms: +pct(times, 0.99).toFixed(3),
                bytes_out: bytes, entry_bytes: entry, header_section_bytes: sections};
            rows.push(row);
            console.log(`${c.name.padEnd(24)} p50 ${row.p50_ms.toFixed(3)} ms  p99 ${row.p99_ms.toFixed(3)} ms  ` +
                `${bytes} B out  entry ${entry} B (headers ${sections} B)`);
        }
        console.log(JSON.stringify({n: N, warmup: WARMUP, answer_bytes: SIZE, cases: rows}));
    } finally {
        agent.destroy();
        await proxy.stop(10000);
        await mock.close();
        await redis.stop();
    }
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});
