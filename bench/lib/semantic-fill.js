#!/usr/bin/env node
'use strict';
/*
 * bench/lib/semantic-fill.js - part of bench/run: fills a promptcache that
 * runs with `semantic yes` with N distinct questions through the proxy (each
 * sent with Cache-Control: no-cache, so it is stored with its vector without
 * a lookup), then writes the request bodies wrk replays, keeping only those
 * checked to hit as intended:
 *   OUT/sem-exact.jsonl     the stored questions again (X-Cache-Match: exact)
 *   OUT/sem-reworded.jsonl  the same questions reworded: lower case, no
 *                           punctuation (X-Cache-Match: semantic)
 * The questions are those of bench/semantic-speed (distinct, far apart);
 * with --partitions P the system prompt spreads them over P partitions.
 *
 *   node bench/lib/semantic-fill.js --url http://127.0.0.1:PORT --n 100000 \
 *       --partitions 1000 --queries 2000 --out DIR
 * Last line of output: one JSON object (vectors, fill rate, hits checked).
 */
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const {performance} = require('node:perf_hooks');
const {question, reword, chatBody} = require('./questions');

function parseArgs(argv) {
    const o = {url: null, n: 100000, partitions: 1000, queries: 2000, out: '.', concurrency: 32,
        auth: 'Bearer sk-bench'};
    for (let i = 0; i < argv.length; i += 2) {
        const k = argv[i].replace(/^--/, ''), v = argv[i + 1];
        if (!(k in o)) throw new Error(`unknown option ${argv[i]}`);
        o[k] = typeof o[k] === 'number' ? Number(v) : v;
    }
    if (!o.url) throw new Error('--url is required');
    return o;
}

const agent = new http.Agent({keepAlive: true, maxSockets: 64});

function post(url, body, auth, headers = {}) {
    return new Promise((resolve, reject) => {
        const data = Buffer.from(body);
        const req = http.request(url + '/v1/chat/completions', {method: 'POST', agent, headers: {
            'content-type': 'application/json', 'content-length': data.length, authorization: auth,
            ...headers}}, (res) => {
            res.resume();
            res.on('end', () => resolve({status: res.statusCode, headers: res.headers}));
        });
        req.on('error', reject);
        req.end(data);
    });
}

async function pool(n, total, fn) {
    let next = 0;
    await Promise.all(Array.from({length: n}, async () => {
        while (next < total)
            await fn(next++);
    }));
}

async function getJson(url) {
    return new Promise((resolve, reject) => {
        http.get(url, {agent}, (res) => {
            let s = '';
            res.setEncoding('utf8');
            res.on('data', (d) => (s += d));
            res.on('end', () => {
                try {
                    resolve(JSON.parse(s));
                } catch (e) {
                    reject(e);
                }
            });
        }).on('error', reject);
    });
}

async function main() {
    const o = parseArgs(process.argv.slice(2));
    const t0 = performance.now();
    let lastPrint = t0;
    let done = 0;
    await pool(o.concurrency, o.n, async (i) => {
        const r = await post(o.url, chatBody(i, o.partitions, question(i)), o.auth, {'cache-control': 'no-cache'});
        if (r.status !== 200) throw new Error(`fill ${i}: HTTP ${r.status}`);
        done++;
        const now = performance.now();
        if (now - lastPrint > 10000) {
            lastPrint = now;
            process.stderr.write(`  semantic fill: ${done}/${o.n} (${Math.round(done / ((now - t0) / 1000))}/s)\n`);
        }
    });
    const fillS = (performance.now() - t0) / 1000;
    const stats = await getJson(o.url + '/stats');

    /* Queries spread over the whole set; each checked once, kept only if it hits as intended. */
    const q = Math.min(o.queries, o.n);
    const picks = Array.from({length: q}, (_, k) => Math.floor((k * o.n) / q));
    const exact = [], reworded = [];
    let exactOk = 0, semOk = 0;
    await pool(8, q, async (k) => {
        const i = picks[k];
        const eb = chatBody(i, o.partitions, question(i));
        const sb = chatBody(i, o.partitions, reword(question(i)));
        const re = await post(o.url, eb, o.auth);
        if (re.status === 200 && re.headers['x-cache-match'] === 'exact') {
            exact.push(eb);
            exactOk++;
        }
        const rs = await post(o.url, sb, o.auth);
        if (rs.status === 200 && rs.headers['x-cache-match'] === 'semantic') {
            reworded.push(sb);
            semOk++;
        }
    });
    fs.writeFileSync(path.join(o.out, 'sem-exact.jsonl'), exact.join('\n') + '\n');
    fs.writeFileSync(path.join(o.out, 'sem-reworded.jsonl'), reworded.join('\n') + '\n');
    agent.destroy();
    console.log(JSON.stringify({vectors: stats.semantic_vectors, partitions: stats.semantic_partitions,
        fill_s: Number(fillS.toFixed(1)), fill_per_s: Math.round(o.n / fillS), checked: q,
        exact_hits: exactOk, semantic_hits: semOk}));
}

main().catch((e) => {
    console.error(e.stack || String(e));
    process.exit(1);
});
