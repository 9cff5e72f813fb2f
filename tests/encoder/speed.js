#!/usr/bin/env node
'use strict';
/*
 * speed.js - is the encoder fast enough for the tests and benchmarks?
 *
 *   node tests/encoder/speed.js [--rounds N]
 *
 * Starts the encoder server (server.js) and, as the baseline, the mock
 * embedder of tests/mock/semantic.js (the same HTTP and JSON work, no model),
 * each in its own process; measures how long the encoder takes from spawn to
 * "listening" (the model's load), then N sequential POST /v1/embeddings of
 * one question and of a batch of 16, and prints p50 / p90 milliseconds per
 * request for both servers and the encoder's ratio to the baseline. Ends with
 * one JSON line. Not a test: it asserts nothing.
 */
const http = require('node:http');
const path = require('node:path');
const {spawnTracked} = require('../integration/lib/procs');
const {startEncoder} = require('./index');

const QUESTIONS = [
    'How do I reverse a list in Python?', 'What are the side effects of drinking too much coffee?',
    'How can I make my laptop battery last longer?', 'Which trains leave Lisbon for Porto after noon?',
    'What is the capital city of France?', 'How do I fix a flat bicycle tire?',
    'Why is the sky blue?', 'How can I improve my English speaking skills?',
    'What is the difference between a stock and a bond?', 'How do I cook rice without a rice cooker?',
    'What causes the seasons on Earth?', 'How do I reset my router to factory settings?',
    'Is it safe to drink tap water in Lisbon?', 'How many hours of sleep does an adult need?',
    'What is the best way to learn to play the guitar?', 'How do I write a cover letter for a first job?',
];

const agent = new http.Agent({keepAlive: true, maxSockets: 1});

function embed(url, input) {
    const body = Buffer.from(JSON.stringify({model: 'speed', input}));
    return new Promise((resolve, reject) => {
        const req = http.request(`${url}/v1/embeddings`, {method: 'POST', agent,
            headers: {'content-type': 'application/json', 'content-length': body.length}}, (res) => {
            const chunks = [];
            res.on('data', (c) => chunks.push(c));
            res.on('end', () => (res.statusCode === 200 ? resolve()
                : reject(new Error(`${url}: ${res.statusCode} ${Buffer.concat(chunks)}`))));
        });
        req.on('error', reject);
        req.end(body);
    });
}

/* p50 and p90 of the milliseconds of `rounds` sequential requests (after 3 not counted). */
async function latency(url, input, rounds) {
    for (let i = 0; i < 3; i++)
        await embed(url, input);
    const ms = [];
    for (let i = 0; i < rounds; i++) {
        const t = process.hrtime.bigint();
        await embed(url, typeof input === 'string' ? `${input} (${i})` : input.map((q) => `${q} (${i})`));
        ms.push(Number(process.hrtime.bigint() - t) / 1e6);
    }
    ms.sort((a, b) => a - b);
    const q = (f) => ms[Math.min(ms.length - 1, Math.floor(f * ms.length))];
    return {p50: q(0.5), p90: q(0.9)};
}

async function startBaseline() {
    const proc = spawnTracked('mock-embedder', process.execPath,
        [path.join(__dirname, '..', 'mock', 'semantic.js'), '--port', '0']);
    const port = await new Promise((resolve, reject) => {
        proc.onOutput = () => {
            const m = /listening [^:]+:(\d+)/.exec(proc.stdout);
            if (m)
                resolve(Number(m[1]));
        };
        proc.exited.then(() => reject(new Error(`the mock embedder exited: ${proc.tail(10)}`)));
    });
    return {url: `http://127.0.0.1:${port}`, stop: () => proc.terminate(5000)};
}

async function main() {
    const i = process.argv.indexOf('--rounds');
    const rounds = i > 0 ? Number(process.argv[i + 1]) : 50;
    const t0 = process.hrtime.bigint();
    const enc = await startEncoder();
    const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;
    const base = await startBaseline();
    const out = {rounds, load_ms: Math.round(loadMs)};
    try {
        console.log(`encoder: spawn to listening ${loadMs.toFixed(0)} ms (node start and model load)`);
        console.log('request            encoder p50 / p90 ms   baseline p50 / p90 ms   ratio (p50)');
        for (const [name, input] of [['one question', QUESTIONS[0]], ['batch of 16', QUESTIONS]]) {
            const e = await latency(enc.url, input, rounds);
            const b = await latency(base.url, input, rounds);
            out[name.replace(/ /g, '_')] = {encoder: e, baseline: b, ratio: e.p50 / b.p50};
            console.log(`${name.padEnd(18)} ${e.p50.toFixed(1).padStart(8)} / ${e.p90.toFixed(1).padEnd(12)}`
                + `${b.p50.toFixed(1).padStart(8)} / ${b.p90.toFixed(1).padEnd(14)}${(e.p50 / b.p50).toFixed(1)}x`);
        }
    } finally {
        agent.destroy();
        await enc.stop();
        await base.stop();
    }
    console.log(JSON.stringify(out));
}

main().catch((e) => {
    console.error(e.stack || String(e));
    process.exit(1);
});
