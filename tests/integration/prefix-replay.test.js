'use strict';
/*
 * bench/prefix-replay end to end on a small trace written here: the proxy,
 * a private Redis and a mock vLLM replica, and the accounting of the JSON
 * line it ends with. The trace is built so that the cached tokens do not
 * depend on the order in which requests reach the replica: n requests share
 * two blocks and m others share one, each followed by blocks of its own, so
 * with room for everything (n-1) x 1024 + (m-1) x 512 tokens are found in
 * the cache whoever comes first. The replica counts 3 template tokens more
 * per prompt than the trace (the chat template's role line). Also: without a
 * trace, it skips and exits 0.
 */
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const {execFile} = require('node:child_process');
const h = require('./lib');

const SCRIPT = path.join(h.REPO, 'bench', 'prefix-replay');

function run(args, env = {}) {
    return new Promise((resolve) => {
        execFile(process.execPath, [SCRIPT, ...args], {env: {...process.env, PROMPTCACHE_BIN: h.proxyBin(), ...env},
            timeout: 120000, maxBuffer: 16 * 1024 * 1024}, (err, stdout, stderr) =>
            resolve({code: err ? err.code : 0, stdout, stderr}));
    });
}

/* n requests on blocks [0, 1, own...], m on [2, own...]; every 20 ms of trace time. */
function writeTrace(dir, n, m) {
    const rows = [];
    let next = 100;
    for (let i = 0; i < n + m; i++) {
        const shared = i < n ? [0, 1] : [2];
        const own = [next++, next++];
        const input = (shared.length + 1) * 512 + 100 + i; /* the last block is partial */
        rows.push({timestamp: i * 20, input_length: input, output_length: 3, hash_ids: [...shared, ...own]});
    }
    const file = path.join(dir, 'trace.jsonl');
    fs.writeFileSync(file, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
    return {file, rows};
}

h.test('replays a trace through the proxy and accounts cached tokens exactly', {timeout: 120000}, async () => {
    const [n, m] = [6, 4];
    const {file, rows} = writeTrace(h.tmpDir('pc-replay-'), n, m);
    const r = await run([file, '--replicas', '1', '--speedup', '1', '--capacity-factor', '1', '--decode-us', '100']);
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.trim().split('\n');
    const report = JSON.parse(lines[lines.length - 1]);
    assert.match(r.stdout, /^round-robin +\d+ /m, 'a readable table before the JSON line');

    const inputs = rows.reduce((s, x) => s + x.input_length, 0);
    const cached = (n - 1) * 1024 + (m - 1) * 512;
    assert.equal(report.ideal, Number((cached / inputs).toFixed(4)));
    assert.deepEqual(Object.keys(report.policies).sort(), ['least-loaded', 'prefix', 'round-robin']);
    const rr = report.policies['round-robin'];
    assert.equal(rr.requests, n + m);
    assert.equal(rr.errors, 0);
    assert.equal(rr.prompt_tokens, inputs + 3 * (n + m));
    assert.equal(rr.cached_tokens, cached);
    assert.equal(rr.token_hit_rate, Number((cached / rr.prompt_tokens).toFixed(4)));
    assert.equal(rr.metrics_hit_rate, rr.token_hit_rate, "the replica's /metrics agree with the usage");
    assert.deepEqual(rr.per_replica, [n + m]);
    assert.equal(rr.max_mean_load, 1);
    for (const k of ['ttft_p50_ms', 'ttft_p99_ms', 'ttft_mean_ms'])
        assert.ok(rr[k] > 0, k);
    for (const p of ['least-loaded', 'prefix'])
        assert.ok(report.policies[p].skipped || report.policies[p].token_hit_rate !== undefined, p);
});

h.test('without a trace it says so and exits 0', async () => {
    const r = await run([], {PC_DATA_DIR: path.join(h.tmpDir('pc-replay-'), 'absent')});
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /no trace at .*absent.*skipping/);
});

h.test('bad options exit non-zero with a message', async () => {
    const r = await run(['--replicas', 'two']);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /--replicas needs a number/);
});
