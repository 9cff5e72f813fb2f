#!/usr/bin/env node
'use strict';
/*
 * bench/redis-memory.js - Redis memory per cached answer, measured through
 * the proxy: a private redis-server, the mock upstream and the real binary;
 * N distinct requests per kind of answer; then Redis' own accounting
 * (INFO memory used_memory before and after, MEMORY USAGE and STRLEN of a
 * sample of the stored keys). Run on demand, never a test:
 *
 *   node bench/redis-memory.js [N]           (default N = 2000 per kind)
 *
 * Answer sizes: the median and 90th percentile output lengths of the
 * Mooncake conversation trace (PC_DATA_DIR, default ../shared/data next to
 * the repository, else /work/shared/data), at 4 bytes per token; 350 and 600
 * tokens when the trace is absent. Streamed answers are stored as the SSE
 * events they came as, one event per token like OpenAI's. Prints a table and
 * one JSON line.
 */
const fs = require('node:fs');
const path = require('node:path');
const h = require('../tests/integration/lib');

const N = Number(process.argv[2] || 2000);
const CONCURRENCY = 16;
const BYTES_PER_TOKEN = 4;
const CHAT = '/v1/chat/completions';

function dataDir() {
    const repo = path.resolve(__dirname, '..');
    for (const d of [process.env.PC_DATA_DIR, path.join(repo, '..', 'shared', 'data'), '/work/shared/data'])
        if (d && fs.existsSync(d))
            return d;
    return null;
}

/* Output tokens at the 50th and 90th percentile of the trace, or defaults. */
function answerTokens() {
    const dir = dataDir();
    const file = dir && path.join(dir, 'traces', 'mooncake_conversation_trace.jsonl');
    if (!file || !fs.existsSync(file))
        return {p50: 350, p90: 600, source: 'defaults (trace absent)'};
    const out = fs.readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l).output_length)
        .sort((a, b) => a - b);
    const q = (p) => out[Math.floor(p * (out.length - 1))];
    return {p50: q(0.5), p90: q(0.9), source: `Mooncake trace, ${out.length} requests`};
}

async function usedMemory(redis) {
    const info = await redis.command('INFO', 'memory');
    return Number(/used_memory:(\d+)/.exec(info)[1]);
}

/* Run fn(i) for i in [0, n) with a bounded number in flight. */
async function pool(n, fn) {
    let next = 0;
    const worker = async () => {
        while (next < n)
            await fn(next++);
    };
    await Promise.all(Array.from({length: CONCURRENCY}, worker));
}

async function measure(env, kind) {
    const before = new Set(await env.redis.keys('pc:*:e:*'));
    const mem0 = await usedMemory(env.redis);
    await pool(N, async (i) => {
        const body = h.chatBody(`${kind.name} question ${i} ${h.uniq('m')}`, kind.stream ? h.STREAM_WITH_USAGE : {});
        const res = await env.proxy.post(CHAT, body, kind.headers);
        if (res.status !== 200)
            throw new Error(`${kind.name}: status ${res.status}: ${res.text.slice(0, 200)}`);
    });
    /* A reply completes only once Redis acknowledged its entry: every store is done. */
    const keys = (await env.redis.keys('pc:*:e:*')).filter((x) => !before.has(x));
    if (keys.length < N * 0.95)
        throw new Error(`${kind.name}: only ${keys.length} of ${N} answers were stored`);
    const mem1 = await usedMemory(env.redis);
    const sample = keys.slice(0, 200);
    let usage = 0;
    let strlen = 0;
    for (const k of sample) {
        usage += await env.redis.command('MEMORY', 'USAGE', k, 'SAMPLES', '0');
        strlen += await env.redis.command('STRLEN', k);
    }
    return {
        kind: kind.name, entries: keys.length,
        used_memory_per_entry: Math.round((mem1 - mem0) / keys.length),
        memory_usage_avg: Math.round(usage / sample.length),
        value_bytes_avg: Math.round(strlen / sample.length),
    };
}

async function main() {
    const tokens = answerTokens();
    const kinds = [
        {name: `json-p50 (${tokens.p50} tokens)`, headers: {'x-mock-size': String(tokens.p50 * BYTES_PER_TOKEN)}},
        {name: `json-p90 (${tokens.p90} tokens)`, headers: {'x-mock-size': String(tokens.p90 * BYTES_PER_TOKEN)}},
        {name: `sse-p50 (${tokens.p50} events)`, stream: true,
            headers: {'x-mock-size': String(tokens.p50 * BYTES_PER_TOKEN), 'x-mock-chunks': String(tokens.p50)}},
    ];
    const mock = await h.startMock();
    const redis = await h.startRedis();
    const proxy = await h.startProxy({mock, redis, logLevel: 'notice', args: ['--access-log', 'off', '--redis-timeout', '2000']});
    await proxy.waitReady();
    const env = {mock, redis, proxy};
    const rows = [];
    try {
        for (const k of kinds)
            rows.push(await measure(env, k));
    } finally {
        await proxy.stop();
        await mock.close();
        await redis.stop();
    }
    console.log(`answer sizes from: ${tokens.source}; ${N} entries per kind; redis ${redis.port}`);
    console.log('kind                              used_memory/entry  MEMORY USAGE avg  value bytes avg');
    for (const r of rows)
        console.log(`${r.kind.padEnd(34)}${String(r.used_memory_per_entry).padStart(17)}` +
            `${String(r.memory_usage_avg).padStart(18)}${String(r.value_bytes_avg).padStart(17)}`);
    console.log(JSON.stringify({bench: 'redis-memory', n: N, sizes: tokens, rows}));
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});
