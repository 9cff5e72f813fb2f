'use strict';
/*
 * `promptcache report --redis URL [--format table|json|csv] [--hours N]`:
 * the proxies count requests, hits, misses and tokens per hour, model and
 * tenant in Redis; the report sums them and prices the saved tokens.
 */
const assert = require('node:assert/strict');
const path = require('node:path');
const h = require('./lib');

const env = h.environment();

const CHAT = '/v1/chat/completions';
const MESSAGES = '/v1/messages';
const PRICING = path.join(h.REPO, 'conf', 'pricing.json');
const DATED_MODEL = 'gpt-4o-mini-2024-07-18'; /* priced by its prefix gpt-4o-mini */

async function report(...args) {
    const r = await h.runCli(['report', '--redis', env.redis.url, ...args]);
    assert.equal(r.code, 0, r.output);
    return r;
}

/* Send the workload; returns what the report must show, from the answers themselves. */
async function workload() {
    const want = {a: {hits: 0, misses: 0, bypasses: 0, prompt: 0, completion: 0},
        b: {hits: 0, misses: 0, bypasses: 0, prompt: 0, completion: 0}};
    const count = (who, r, usage) => {
        if (r.cache === 'HIT') {
            want[who].hits++;
            want[who].prompt += usage.prompt;
            want[who].completion += usage.completion;
        } else if (r.cache === 'MISS') {
            want[who].misses++;
        } else {
            want[who].bypasses++;
        }
    };
    const a = h.bearer('sk-report-tenant-a');
    const b = h.apiKey('sk-report-tenant-b');
    const q1 = h.chatBody(h.uniq('report one'), {model: DATED_MODEL});
    const q2 = h.chatBody(h.uniq('report two'), {model: DATED_MODEL});
    for (const body of [q1, q1, q1, q2]) {
        const r = await env.proxy.post(CHAT, body, a);
        count('a', r, {prompt: r.json.usage.prompt_tokens, completion: r.json.usage.completion_tokens});
    }
    const off = await env.proxy.post(CHAT, q2, {...a, 'x-cache-mode': 'off'});
    count('a', off, null);
    const q3 = h.messagesBody(h.uniq('report three'));
    for (const body of [q3, q3]) {
        const r = await env.proxy.post(MESSAGES, body, b);
        const u = r.json.usage;
        count('b', r, {prompt: u.input_tokens + (u.cache_creation_input_tokens || 0) +
            (u.cache_read_input_tokens || 0), completion: u.output_tokens});
    }
    return want;
}

let want;
let tenants;

h.test('report sums what the proxies counted, per model and per tenant', async () => {
    want = await workload();
    const log = await h.waitFor(() => {
        const lines = env.proxy.accessLog();
        return lines.length >= 7 ? lines : null;
    }, {what: 'seven access log lines'});
    tenants = {a: log.find((l) => l.endpoint === 'chat').tenant,
        b: log.find((l) => l.endpoint === 'messages').tenant};
    /* Workers flush their counts about once a second. */
    const j = await h.waitFor(async () => {
        const r = JSON.parse((await report('--format', 'json', '--pricing', 'off')).stdout);
        return r.total.requests >= 7 ? r : null;
    }, {timeout: 15000, what: 'the report to show all seven requests'});
    assert.equal(j.total.requests, 7);
    assert.equal(j.total.hits, want.a.hits + want.b.hits);
    assert.equal(j.total.misses, want.a.misses + want.b.misses);
    assert.equal(j.total.bypasses, 1);
    assert.equal(j.currency, null, 'pricing off: no currency');
    assert.equal(j.total.money_saved, null);

    const model = (name) => j.models.find((m) => m.model === name);
    assert.equal(model(DATED_MODEL).requests, 5);
    assert.equal(model(h.CLAUDE_MODEL).requests, 2);
    for (const who of ['a', 'b']) {
        const t = j.tenants.find((x) => x.tenant === tenants[who]);
        assert.ok(t, `tenant ${who} (${tenants[who]}) in the report`);
        assert.equal(t.hits, want[who].hits);
        assert.equal(t.misses, want[who].misses);
        assert.equal(t.saved_prompt_tokens, want[who].prompt, 'prompt tokens saved');
        assert.equal(t.saved_completion_tokens, want[who].completion, 'completion tokens saved');
        assert.ok(t.upstream_prompt_tokens > 0, 'upstream tokens counted on misses');
    }
    assert.ok(Math.abs(j.total.hit_rate - j.total.hits / (j.total.hits + j.total.misses)) < 1e-4);
});

h.test('report prices the saved tokens with the pricing file', async () => {
    const j = JSON.parse((await report('--format', 'json', '--pricing', PRICING)).stdout);
    assert.equal(j.currency, 'USD');
    /* conf/pricing.json: gpt-4o-mini 0.15 / 0.60, claude-sonnet-4-5 3.00 / 15.00 per 1M tokens. */
    const expected = (want.a.prompt * 0.15 + want.a.completion * 0.60 +
        want.b.prompt * 3.00 + want.b.completion * 15.00) / 1e6;
    assert.ok(Math.abs(j.total.money_saved - expected) < 1e-6,
        `money_saved ${j.total.money_saved}, expected ${expected}`);
});

h.test('report as a table and as CSV', async () => {
    const table = (await report('--hours', '2')).stdout;
    assert.match(table, /^promptcache report, /);
    assert.match(table, /by model\n {2}gpt-4o-mini-2024-07-18 /);
    assert.match(table, /by tenant\n/);
    const csv = (await report('--format=csv')).stdout.trim().split('\n');
    assert.match(csv[0], /^scope,name,requests,hits,misses,/);
    assert.match(csv[1], /^total,,7,/);
    assert.equal(csv.length, 1 + 1 + 2 + 2, 'total, two models, two tenants');
});

h.test('report refuses bad options and says why when Redis is unreachable', async () => {
    const bad = await h.runCli(['report', '--redis', env.redis.url, '--format', 'xml']);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--format must be table, json or csv/);
    const hours = await h.runCli(['report', '--redis', env.redis.url, '--hours', '0']);
    assert.equal(hours.code, 2);
    const port = await h.freePort();
    const down = await h.runCli(['report', '--redis', `redis://127.0.0.1:${port}/0`]);
    assert.equal(down.code, 1);
    assert.match(down.stderr, /cannot connect to/);
});

h.test('failed requests are counted as errors under (other), never as their own model', async () => {
    const before = JSON.parse((await report('--format', 'json')).stdout);
    const otherBefore = (before.models.find((m) => m.model === '(other)') || {errors: 0}).errors;
    for (let i = 0; i < 3; i++) {
        const r = await env.proxy.post(CHAT, h.chatBody(h.uniq('will fail'), {model: `junk-model-${i}`}),
            {...h.bearer(`sk-random-${i}`), 'x-mock-status': '500'});
        assert.equal(r.status, 500);
    }
    const j = await h.waitFor(async () => {
        const r = JSON.parse((await report('--format', 'json')).stdout);
        const other = r.models.find((m) => m.model === '(other)');
        return other && other.errors >= otherBefore + 3 ? r : null;
    }, {timeout: 15000, what: 'three errors under (other)'});
    assert.ok(!j.models.some((m) => m.model.startsWith('junk-model')), 'no row per junk model');
    assert.ok(j.tenants.some((t) => t.tenant === '(other)'));
    assert.equal(j.total.errors, otherBefore + 3);
});

const sum = (rows, m) => rows.reduce((s, x) => s + x[m], 0);

h.test('a forged hour of 210k counters: report reads a bounded part, sums the models past 500 as (other) and says so', async () => {
    const key = h.tallyHourKey(Date.now() - 2 * 3600 * 1000); /* an hour no proxy writes now */
    await h.forgeHash(env.redis, key, 210000, `'requests|-|forged-model-' .. i`, '1');
    try {
        const j = JSON.parse((await report('--hours', '3', '--format', 'json')).stdout);
        assert.match(String(j.partial), new RegExp(`^${key}: .*the rest was not read`));
        assert.ok(j.models.length <= 500 + 1, `${j.models.length} model rows`);
        assert.ok(j.models.some((m) => m.model === '(other)' && m.requests > 100000), 'the rest under (other)');
        assert.ok(j.total.requests > 100000 && j.total.requests < 210000 + 1000, `${j.total.requests} requests`);
        for (const m of ['requests', 'hits', 'misses', 'errors']) {
            assert.equal(sum(j.models, m), j.total[m], `models' ${m} add up to the total`);
            assert.equal(sum(j.tenants, m), j.total[m], `tenants' ${m} add up to the total`);
        }
        const t = await report('--hours', '3');
        assert.match(t.stdout, new RegExp(`\\(read in part: ${key}: .*the rest was not read`));
        assert.ok(t.stdout.split('\n').filter((l) => l.startsWith('  forged-model-')).length <= 500);
        assert.match(t.stderr, /read in part/);
        const csv = await report('--hours', '3', '--format', 'csv');
        const lines = csv.stdout.trim().split('\n');
        assert.ok(lines.filter((l) => l.startsWith('model,')).length <= 501, 'CSV rows bounded');
        assert.match(lines[0], /^scope,name,requests,/, 'the CSV format is unchanged');
        assert.match(csv.stderr, new RegExp(`read in part: ${key}`));
    } finally {
        await env.redis.command('DEL', key);
    }
});

h.test('200k forged key fingerprints: report takes a bounded part and says so', async () => {
    const fs = require('node:fs');
    const os = require('node:os');
    const names = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'pc-report-')), 'tenant-names');
    fs.writeFileSync(names, `sha256:${'ab'.repeat(32)} forged keys test\n`);
    await h.forgeHash(env.redis, 'pc:2:tk', 200000, `string.format('%016x', i)`, `string.format('%016x', i)`);
    try {
        const r = await report('--tenant-names', names, '--format', 'json');
        const j = JSON.parse(r.stdout);
        assert.match(String(j.partial), /^pc:2:tk: .*the rest was not read/);
        assert.equal(sum(j.tenants, 'requests'), j.total.requests);
        assert.match(r.stderr, /read in part: pc:2:tk/);
    } finally {
        await env.redis.command('DEL', 'pc:2:tk');
        fs.rmSync(path.dirname(names), {recursive: true, force: true});
    }
});

h.test('a forged or saturated counter in Redis costs no other counter of the flush', async () => {
    const db = 10;
    const url = env.redis.url.replace(/\/\d+$/, `/${db}`);
    const inDb = (script, ...args) => env.redis.command('EVAL', `redis.call('SELECT', ${db}) ${script}`, ...args);
    const MAX = '9223372036854775807';
    /* The hour the request will be counted in, and the next (should it turn meanwhile). */
    const keys = [h.tallyHourKey(Date.now()), h.tallyHourKey(Date.now() + 3600 * 1000)];
    for (const key of keys) {
        await inDb("redis.call('HSET', KEYS[1], 'requests|(other)|(other)', 'not a number')", '1', key);
        await inDb("redis.call('HSET', KEYS[1], 'misses|(other)|(other)', '9223372036854775807')", '1', key);
    }
    const p = await env.startProxy({redis: url});
    await p.waitReady();
    const r = await p.post(CHAT, h.chatBody(h.uniq('flush past junk')), {'x-mock-status': '502'});
    assert.equal(r.status, 502);
    const field = (key, f) => inDb("return redis.call('HGET', KEYS[1], ARGV[1])", '1', key, f);
    const key = await h.waitFor(async () => {
        for (const k of keys)
            if (await field(k, 'errors|(other)|(other)') === '1')
                return k;
        return null;
    }, {timeout: 10000, what: 'the error counted in Redis, past the junk and the full counter'});
    assert.equal(await field(key, 'requests|(other)|(other)'), '1', 'junk replaced by the count');
    assert.equal(await field(key, 'misses|(other)|(other)'), MAX, 'a full counter stays full');
    assert.ok(await inDb("return redis.call('TTL', KEYS[1])", '1', key) > 0, 'the hour expires');
    await p.stop();
});

h.test('a key of another type under an hour\'s name (or pc:2:tk) is skipped and noted; the other hours are reported', async () => {
    const HOUR = 3600 * 1000;
    const hour = (n) => h.tallyHourKey(Date.now() - n * HOUR); /* hours no proxy writes now */
    const model = `wrongtype-${h.uniq('m').split(' ')[1]}`.replace(/[^A-Za-z0-9.-]/g, '');
    const keys = [hour(3), hour(4), hour(5), hour(6), 'pc:2:tk'];
    try {
        await env.redis.command('DEL', ...keys);
        await env.redis.command('HSET', hour(4), `requests|-|${model}`, '7');
        await env.redis.command('HSET', hour(6), `requests|-|${model}`, '5');
        await env.redis.command('SET', hour(3), 'a string someone else wrote');
        await env.redis.command('RPUSH', hour(5), 'a list');
        await env.redis.command('SET', 'pc:2:tk', 'not a hash either');
        const j = JSON.parse((await report('--hours', '8', '--format', 'json')).stdout);
        const row = j.models.find((m) => m.model === model);
        assert.ok(row, `the model of the readable hours is reported: ${JSON.stringify(j.models.map((m) => m.model))}`);
        assert.equal(row.requests, 12, 'both readable hours summed');
        assert.match(String(j.partial), /not a hash/);
        const t = await report('--hours', '8');
        assert.match(t.stdout, /\(read in part: .*not a hash/);
        assert.match(t.stderr, /read in part: .*not a hash/);
        const csv = await report('--hours', '8', '--format', 'csv');
        assert.match(csv.stdout, new RegExp(`^model,${model},12,`, 'm'));
    } finally {
        await env.redis.command('DEL', ...keys);
    }
});
