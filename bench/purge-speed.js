#!/usr/bin/env node
'use strict';
/*
 * bench/purge-speed.js - what a targeted delete costs next to a plain flush
 * of the same entries, through the running proxy: N copies of one real
 * entry (stored through the proxy with X-Cache-Namespace, then copied in
 * Redis under N keys of its tenant), deleted by DELETE /admin/cache
 * ?tenant= (SCAN + UNLINK: the baseline), ?namespace= (the pick script reads
 * each entry's head and sections) and ?older-than= (its head only), each
 * ROUNDS times; the median of each and its ratio to the baseline. On demand
 * only; the figures depend on the machine.
 *
 *   PROMPTCACHE_BIN=build/promptcache node bench/purge-speed.js
 *   N=100000 ROUNDS=5 node bench/purge-speed.js
 */
const h = require('../tests/integration/lib');

const N = Number(process.env.N || 20000);
const ROUNDS = Number(process.env.ROUNDS || 3);
const TOKEN = 'bench-admin-token';

/* Copy the template under N keys of tenant t (inside Redis: quick, and no upstream calls). */
const FILL = `local v = redis.call('DUMP', KEYS[1])
for i = 1, tonumber(ARGV[1]) do
  redis.call('RESTORE', 'pc:2:e:{' .. ARGV[2] .. ':' .. string.format('%064x', i) .. '}', 0, v, 'REPLACE')
end
return 1`;

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main() {
    const redis = await h.startRedis();
    const mock = await h.startMock();
    const proxy = await h.startProxy({mock, redis, logLevel: 'notice', args: ['--admin-token', TOKEN]});
    try {
        await proxy.waitReady();
        const r = await proxy.post('/v1/chat/completions', h.chatBody('purge speed'),
            {'x-cache-namespace': 'bench'});
        const key = r.headers['x-cache-key'];
        const tenant = key.slice(0, 16);
        await redis.command('COPY', `pc:2:e:{${tenant}:${key.slice(16)}}`, 'bench:template');
        await redis.command('PERSIST', 'bench:template');
        const cases = [
            ['tenant flush (SCAN + UNLINK)', `tenant=${tenant}`],
            ['namespace (head and sections)', 'namespace=bench'],
            ['older-than (head only)', `older-than=2099-01-01&tenant=${tenant}`],
        ];
        const ms = cases.map(() => []);
        for (let round = 0; round < ROUNDS; round++)
            for (let c = 0; c < cases.length; c++) {
                await redis.command('EVAL', FILL, '1', 'bench:template', String(N), tenant);
                const t0 = process.hrtime.bigint();
                const res = await h.request(proxy.url, {method: 'DELETE', path: `/admin/cache?${cases[c][1]}`,
                    headers: {authorization: `Bearer ${TOKEN}`}});
                ms[c].push(Number(process.hrtime.bigint() - t0) / 1e6);
                if (res.status !== 200 || JSON.parse(res.text).deleted < N)
                    throw new Error(`${cases[c][0]}: ${res.status} ${res.text}`);
            }
        const base = median(ms[0]);
        console.log(`${N} entries, median of ${ROUNDS} rounds`);
        for (let c = 0; c < cases.length; c++)
            console.log(`  ${cases[c][0].padEnd(32)} ${median(ms[c]).toFixed(0).padStart(6)} ms` +
                `  ${(median(ms[c]) / base).toFixed(1)}x the flush`);
    } finally {
        await proxy.stop();
        await mock.close();
        await redis.stop();
    }
}

main().catch((e) => {
    console.error(e.stack || e.message);
    process.exit(1);
});
