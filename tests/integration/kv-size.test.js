'use strict';
/*
 * `promptcache kv-size [MODEL] [--layers --kv-heads --head-dim --dtype]
 * [--gpu-memory GiB] [--format json]`: the binary prints the KV-cache
 * arithmetic of a model and the tokens that fit, and fails clearly (exit 2,
 * a message on stderr) on unknown models and bad numbers. Needs no Redis.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

async function kvSize(...args) {
    return h.runCli(['kv-size', ...args]);
}

h.test('a known model: 128 KiB per token, 32k tokens in 4 GiB, capacity for the GPU memory', async () => {
    const r = await kvSize('Llama-3.1-8B-Instruct', '--gpu-memory', '40');
    assert.equal(r.code, 0, r.output);
    assert.equal(r.stderr, '');
    assert.match(r.stdout, /^model +llama-3\.1-8b$/m);
    assert.match(r.stdout, /^bytes per token +2 x 32 x 8 x 128 x 2 = 131072 \(128 KiB\)$/m);
    assert.match(r.stdout, /^32768 tokens +4 GiB$/m);
    assert.match(r.stdout, /^capacity tokens +327680$/m);
});

h.test('JSON output; flags override the model and stand without one', async () => {
    const json = await kvSize('qwen2.5-72b', '--dtype=fp8', '--gpu-memory', '10', '--format', 'json');
    assert.equal(json.code, 0, json.output);
    assert.deepEqual(JSON.parse(json.stdout), {
        model: 'qwen2.5-72b', layers: 80, kv_heads: 8, head_dim: 128, dtype: 'fp8', bytes_per_value: 1,
        bytes_per_token: 163840, tokens: 32768, bytes_for_tokens: 163840 * 32768, gpu_memory_gib: 10,
        capacity_tokens: 65536,
    });
    const custom = await kvSize('--layers', '40', '--kv-heads', '8', '--head-dim', '128', '--format', 'json');
    assert.equal(custom.code, 0, custom.output);
    const c = JSON.parse(custom.stdout);
    assert.equal(c.model, null);
    assert.equal(c.bytes_per_token, 2 * 40 * 8 * 128 * 2);
    assert.equal(c.capacity_tokens, undefined, 'no capacity without --gpu-memory');
    const override = await kvSize('llama-3.1-8b', '--layers', '16', '--format', 'json');
    assert.equal(JSON.parse(override.stdout).bytes_per_token, 65536);
});

h.test('unknown models list the known ones; bad numbers and options exit 2', async () => {
    const unknown = await kvSize('gpt-4o');
    assert.equal(unknown.code, 2);
    assert.equal(unknown.stdout, '');
    assert.match(unknown.stderr, /unknown model "gpt-4o"; known models: .*llama-3\.1-70b.*gemma-2-27b/);
    for (const args of [['--layers', '0', '--kv-heads', '8', '--head-dim', '128'],
        ['llama-3.1-8b', '--gpu-memory', 'lots'], ['llama-3.1-8b', '--gpu-memory', '-4'],
        ['llama-3.1-8b', '--dtype', 'int3'], ['llama-3.1-8b', '--bogus', '1'], ['llama-3.1-8b', '--layers'],
        ['--kv-heads', '8'], ['llama-3.1-8b', 'mistral-7b']]) {
        const r = await kvSize(...args);
        assert.equal(r.code, 2, `${args.join(' ')}: ${r.output}`);
        assert.match(r.stderr, /^promptcache kv-size: /, args.join(' '));
        assert.equal(r.stdout, '', args.join(' '));
    }
});

h.test('--help prints the usage and the model table', async () => {
    const r = await kvSize('--help');
    assert.equal(r.code, 0);
    assert.match(r.stdout, /^usage: promptcache kv-size \[MODEL\]/);
    assert.match(r.stdout, /Known models .*mixtral-8x7b/);
});
