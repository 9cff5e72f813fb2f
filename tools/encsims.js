#!/usr/bin/env node
'use strict';
/*
 * encsims.js - the sentence encoder's cosine for every pair semeval knows,
 * so that tools/semeval.c can tune guards and thresholds for `embedder
 * openai` offline, in seconds, as it does for builtin (the figures that go
 * to the README are measured through the proxy by bench/semantic-quality).
 *
 *   build/tools/semeval --pairs-out /tmp/pairs.jsonl
 *   node tools/encsims.js /tmp/pairs.jsonl /tmp/sims.jsonl
 *   build/tools/semeval --sims /tmp/sims.jsonl --threshold 0.92
 *
 * Reads JSON lines ["a","b"], writes ["a","b",cosine] (the encoder's unit
 * vectors, so the cosine is their dot product). Starts
 * tests/encoder/server.js (`make encoder`) and embeds each distinct text
 * once, in batches.
 */
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const {startEncoder} = require(path.join(__dirname, '..', 'tests', 'encoder', 'index.js'));

const BATCH = 32;

function embed(url, texts) {
    const body = Buffer.from(JSON.stringify({model: 'universal-sentence-encoder-lite', input: texts}));
    return new Promise((resolve, reject) => {
        const req = http.request(`${url}/v1/embeddings`, {method: 'POST',
            headers: {'content-type': 'application/json', 'content-length': body.length}}, (res) => {
            const chunks = [];
            res.on('data', (c) => chunks.push(c));
            res.on('end', () => {
                const j = JSON.parse(Buffer.concat(chunks).toString('utf8'));
                if (res.statusCode !== 200)
                    return reject(new Error(`encoder: ${res.statusCode} ${JSON.stringify(j)}`));
                resolve(j.data.map((d) => Float32Array.from(d.embedding)));
            });
        });
        req.on('error', reject);
        req.end(body);
    });
}

function dot(a, b) {
    let s = 0;
    for (let i = 0; i < a.length; i++)
        s += a[i] * b[i];
    return s;
}

async function main() {
    const [input, output] = process.argv.slice(2);
    if (!input || !output)
        throw new Error('usage: encsims.js PAIRS.jsonl SIMS.jsonl');
    const pairs = fs.readFileSync(input, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
    /* The encoder refuses empty strings; such a text (white space only) scores 0. */
    const texts = [...new Set(pairs.flat())].filter((t) => t.trim() !== '');
    const enc = await startEncoder();
    const vec = new Map();
    try {
        for (let i = 0; i < texts.length; i += BATCH) {
            const batch = texts.slice(i, i + BATCH);
            const vs = await embed(enc.url, batch);
            batch.forEach((t, k) => vec.set(t, vs[k]));
            if ((i / BATCH) % 100 === 0)
                process.stderr.write(`encsims: ${i} of ${texts.length} texts\n`);
        }
    } finally {
        await enc.stop();
    }
    const out = pairs.map(([a, b]) => {
        const s = vec.has(a) && vec.has(b) ? dot(vec.get(a), vec.get(b)) : 0;
        return JSON.stringify([a, b, Math.round(s * 1e5) / 1e5]);
    });
    fs.writeFileSync(output, out.join('\n') + '\n');
    process.stderr.write(`encsims: ${pairs.length} pairs, ${texts.length} texts -> ${output}\n`);
}

main().catch((e) => {
    console.error(e.stack || String(e));
    process.exit(1);
});
