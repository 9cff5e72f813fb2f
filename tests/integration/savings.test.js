'use strict';
/*
 * Savings people can trust: known traffic through the mock upstream, with
 * known usage (Anthropic cache reads and writes, OpenAI cached_tokens) and a
 * known price list, gives the exact expected money in /stats, /metrics
 * (checked by promtool), `promptcache report` and the dashboard (its data,
 * and the page rendered by headless chromium); a LiteLLM-format list gives
 * the same figures as the project's own; the figures survive a restart and
 * add up across two instances. Which list and which day the prices come from
 * is shown everywhere; a model the list does not price is unpriced (null,
 * absent, "unpriced"), never 0; the hit rate is one figure in /stats,
 * /metrics, the report and the dashboard; Responses API traffic has its own
 * endpoint label; the Grafana dashboard works when provisioned from a file.
 */
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const {spawnSync} = require('node:child_process');
const h = require('./lib');
const {openBrowser} = require('./lib/browser');
const {createSemanticMock} = require('../mock/semantic');

const CHAT = '/v1/chat/completions';
const MESSAGES = '/v1/messages';

/* Prices per million tokens; the same list in both formats. */
const PRICES = {
    'gpt-4o-mini': {input: 0.15, cache_read: 0.075, cache_write: 0.15, output: 0.6},
    'claude-sonnet-4-5': {input: 3, cache_read: 0.3, cache_write: 3.75, cache_write_1h: 6, output: 15},
};
const dir = h.tmpDir('pc-savings-');
const OWN = path.join(dir, 'pricing.json');
const LITELLM = path.join(dir, 'model_prices_and_context_window.json');
fs.writeFileSync(OWN, JSON.stringify({currency: 'USD', models: {
    'gpt-4o-mini': {input: 0.15, cache_read: 0.075, output: 0.6},
    'claude-sonnet-4-5': {input: 3, cache_read: 0.3, cache_write: 3.75, cache_write_1h: 6, output: 15},
}}));
fs.writeFileSync(LITELLM, JSON.stringify({
    sample_spec: {max_tokens: 'LEGACY parameter', input_cost_per_token: 0, output_cost_per_token: 0,
        litellm_provider: 'one of https://docs.litellm.ai/docs/providers', mode: 'one of chat, embedding'},
    'openai/gpt-4o-mini': {input_cost_per_token: 1.5e-7, cache_read_input_token_cost: 7.5e-8,
        output_cost_per_token: 6e-7, litellm_provider: 'openai', mode: 'chat', max_tokens: 16384},
    'claude-sonnet-4-5': {input_cost_per_token: 3e-6, cache_read_input_token_cost: 3e-7,
        cache_creation_input_token_cost: 3.75e-6, cache_creation_input_token_cost_above_1hr: 6e-6,
        output_cost_per_token: 1.5e-5,
        litellm_provider: 'anthropic', mode: 'chat'},
    'dall-e-3': {input_cost_per_pixel: 1e-8, litellm_provider: 'openai', mode: 'image_generation'},
}));

const env = h.environment({proxyArgs: ['--pricing', OWN]});

/*
 * Money in billionths of a dollar, as the proxy counts it: exact integers. Of the cache writes
 * (u.write), u.hour are kept for an hour, at their own price (Anthropic: 2x input, not 1.25x).
 */
function nano(model, u) {
    const p = PRICES[model];
    if (!p)
        return null;
    const input = u.prompt - u.read - u.write, hour = u.hour || 0;
    return Math.round(1000 * (input * p.input + u.read * p.cache_read +
        (u.write - hour) * p.cache_write + hour * (p.cache_write_1h || p.cache_write) +
        u.output * p.output));
}
/* What writing to the provider's cache cost beyond the input price. */
function premium(model, u) {
    const p = PRICES[model], hour = u.hour || 0;
    return Math.round(1000 * ((u.write - hour) * (p.cache_write - p.input) +
        hour * ((p.cache_write_1h || p.cache_write) - p.input)));
}
const toNano = (v) => Math.round(v * 1e9);
/* The day the list was written (the test wrote it): its date, since it says none. */
const OWN_DAY = new Date(fs.statSync(OWN).mtimeMs).toISOString().slice(0, 10);

/* Calls whose usage the mock reports as told (x-mock-* headers). */
function usageHeaders(u) {
    return {'x-mock-prompt-tokens': String(u.prompt - u.read - u.write),
        'x-mock-cache-read': String(u.read), 'x-mock-cache-write': String(u.write),
        'x-mock-cache-write-1h': String(u.hour || 0),
        'x-mock-completion-tokens': String(u.output)};
}

/* Requests the proxy has counted (it counts just after the reply has gone out). */
async function counted(proxy) {
    const s = await proxy.stats();
    return Object.values(s.api_requests).reduce((a, b) => a + b, 0);
}

async function settle(proxy, n) {
    await h.waitFor(async () => (await counted(proxy)) >= n, {what: `${n} requests counted`});
}

/* One MISS, then `hits` HITs of the same request (after its store), all counted. */
async function missThenHits(proxy, reqPath, body, u, hits, extra = {}) {
    const headers = {...usageHeaders(u), ...extra};
    const base = await counted(proxy);
    const before = (await proxy.stats()).cache_stores;
    const first = await proxy.post(reqPath, body, headers);
    assert.equal(first.status, 200, first.text);
    assert.equal(first.headers['x-cache-status'], 'MISS');
    assert.ok((await proxy.stats()).cache_stores > before, 'stored before the answer was sent');
    for (let i = 0; i < hits; i++)
        h.assertHit(await proxy.post(reqPath, {...body, stream: false}, headers));
    await settle(proxy, base + 1 + hits);
}

/*
 * The workload of one instance; returns what it must have counted. Texts
 * are unique per call of this function (tag), so two instances never share
 * entries.
 */
async function workload(proxy, tag) {
    const want = {saved: 0, upstream: 0, cacheSaved: 0, premium: 0, requests: 0, hits: 0,
        misses: 0, unpriced: 0, savedRead: 0, savedWrite: 0, texts: []};
    const text = (s) => {
        const t = h.uniq(`${tag} ${s} secret-prompt-text`);
        want.texts.push(t);
        return t;
    };
    const count = (model, u, hits) => {
        const c = nano(model, u);
        want.requests += 1 + hits;
        want.hits += hits;
        want.misses += 1;
        if (c === null) {
            want.unpriced += 1 + hits;
            return;
        }
        const p = PRICES[model];
        want.saved += hits * c;
        want.upstream += c;
        want.cacheSaved += Math.round(1000 * u.read * (p.input - p.cache_read));
        want.premium += premium(model, u);
        want.savedRead += hits * u.read;
        want.savedWrite += hits * u.write;
    };
    /*
     * The issue's case: 12 input + 288 cache-read tokens (and cache writes, 40 of them kept for
     * an hour), Anthropic.
     */
    const a = {prompt: 12 + 288 + 100, read: 288, write: 100, hour: 40, output: 50};
    await missThenHits(proxy, MESSAGES, h.messagesBody(text('anthropic')), a, 1);
    count('claude-sonnet-4-5', a, 1);
    /* OpenAI cached_tokens, hit twice. */
    const b = {prompt: 5000, read: 4000, write: 0, output: 200};
    await missThenHits(proxy, CHAT, h.chatBody(text('openai')), b, 2);
    count('gpt-4o-mini', b, 2);
    /* A stream miss (usage asked upstream by the proxy), then a JSON hit. */
    const c = {prompt: 500, read: 0, write: 0, output: 100};
    await missThenHits(proxy, CHAT, h.chatBody(text('stream'), {stream: true}), c, 1);
    count('gpt-4o-mini', c, 1);
    /* A model the list does not price: tokens counted, money unknown. */
    const d = {prompt: 70, read: 0, write: 0, output: 30};
    await missThenHits(proxy, CHAT, h.chatBody(text('unpriced'), {model: 'mystery-model-1'}), d, 1);
    count('mystery-model-1', d, 1);
    return want;
}

function report(args) {
    return h.runCli(['report', '--redis', env.redis.url, '--format', 'json', '--hours', '2', ...args]);
}

/* The Prometheus samples of a text: [{name, labels, value}]. */
function samples(text) {
    const out = [];
    for (const line of text.split('\n')) {
        const m = /^(\w+)(?:\{([^}]*)\})? (\S+)$/.exec(line);
        if (!m)
            continue;
        const labels = {};
        for (const kv of (m[2] || '').matchAll(/(\w+)="([^"]*)"/g))
            labels[kv[1]] = kv[2];
        out.push({name: m[1], labels, value: Number(m[3])});
    }
    return out;
}
const sum = (list, name, pred = () => true) =>
    list.filter((s) => s.name === name && pred(s.labels)).reduce((n, s) => n + s.value, 0);

let want;
let guarded; /* the proxy with a metrics-token */

h.test('a hit saves what the original call cost: /stats, priced per token kind', async () => {
    want = await workload(env.proxy, 'one');
    const s = await env.proxy.stats();
    assert.equal(s.currency, 'USD');
    assert.equal(s.pricing.format, 'promptcache');
    assert.equal(s.pricing.source, 'pricing.json', 'a list that names no source: its file');
    assert.equal(s.pricing.date, OWN_DAY, 'and no date: the file\'s day');
    assert.deepEqual(s.pricing.unpriced_models, ['mystery-model-1']);
    assert.equal(s.money_partial, true, 'sums over the priced answers only');
    assert.equal(toNano(s.saved_cost), want.saved, 'saved_cost');
    assert.equal(toNano(s.saved_cost_exact), want.saved);
    assert.equal(toNano(s.saved_cost_semantic), 0);
    assert.equal(toNano(s.upstream_cost), want.upstream, 'upstream_cost');
    assert.equal(toNano(s.provider_cache_saved_cost), want.cacheSaved, 'provider cache saved');
    assert.equal(toNano(s.provider_cache_write_premium_cost), want.premium, 'write premium');
    assert.equal(toNano(s.net_saved_cost), want.saved, 'no own calls: net = saved');
    assert.equal(s.tokens_saved_cached, want.savedRead);
    assert.equal(s.tokens_saved_cache_write, want.savedWrite);
    assert.equal(s.answers_unpriced, want.unpriced);
    assert.equal(s.saved_tokens.cache_read, want.savedRead);
    assert.equal(s.api_requests.hit, want.hits);
    assert.equal(s.api_requests.miss, want.misses);
    assert.ok(s.latency_saved_seconds >= 0);
    assert.ok(s.request_duration_seconds.hit.count === want.hits);
    /* The issue's example, priced right: about 7x below the old "300 x $3/M". */
    const issue = nano('claude-sonnet-4-5', {prompt: 300, read: 288, write: 0, output: 0});
    assert.equal(issue, 122400);
    assert.ok(300 * 3 * 1000 / issue > 7);
    const log = await env.proxy.waitAccessLog((l) => l.cache === 'HIT' && l.model === 'claude-sonnet-4-5');
    assert.equal(log.cached_tokens, 288);
    assert.equal(log.cache_write_tokens, 100);
    assert.equal(toNano(log.saved),
        nano('claude-sonnet-4-5', {prompt: 400, read: 288, write: 100, hour: 40, output: 50}));
    assert.equal(typeof log.age, 'number');
    const miss = env.proxy.accessLog().find((l) => l.cache === 'MISS' && l.model === 'claude-sonnet-4-5');
    assert.equal(toNano(miss.cost), toNano(log.saved), 'the miss cost what the hit saved');
    const stream = env.proxy.accessLog().find((l) => l.cache === 'MISS' && l.stream);
    assert.equal(typeof stream.ttfb_ms, 'number');
    await h.waitFor(() => /has no price for model "mystery-model-1"/.test(env.proxy.proc.output),
        {what: 'the unpriced model in the log'});
    assert.equal(env.proxy.proc.output.split('no price for model "mystery-model-1"').length, 2,
        'warned once');
});

h.test('/metrics: promtool accepts it; labelled money and tokens agree with /stats', async () => {
    const r = await env.proxy.get('/metrics');
    assert.equal(r.status, 200);
    const check = spawnSync('promtool', ['check', 'metrics'], {input: r.text, encoding: 'utf8'});
    assert.equal(check.error, undefined, 'promtool is installed (make deps-test)');
    assert.equal(check.status, 0, `promtool check metrics:\n${check.stdout}${check.stderr}`);
    const m = samples(r.text);
    assert.equal(toNano(sum(m, 'promptcache_saved_cost_total')), want.saved);
    assert.equal(toNano(sum(m, 'promptcache_saved_cost_total',
        (l) => l.model === 'claude-sonnet-4-5' && l.match === 'exact')),
    nano('claude-sonnet-4-5', {prompt: 400, read: 288, write: 100, hour: 40, output: 50}));
    assert.equal(toNano(sum(m, 'promptcache_upstream_cost_total')), want.upstream);
    assert.equal(sum(m, 'promptcache_saved_tokens_total', (l) => l.token === 'cache_read'),
        want.savedRead);
    assert.equal(sum(m, 'promptcache_api_requests_total', (l) => l.cache === 'hit'), want.hits);
    assert.equal(sum(m, 'promptcache_request_duration_seconds_count', (l) => l.cache === 'miss'),
        want.misses);
    assert.ok(sum(m, 'promptcache_upstream_latency_seconds_count') >= want.misses);
    assert.ok(sum(m, 'promptcache_redis_latency_seconds_count') > 0);
    assert.ok(sum(m, 'promptcache_stream_ttfb_seconds_count') >= 1);
    assert.equal(sum(m, 'promptcache_build_info'), 1);
    const info = m.find((s) => s.name === 'promptcache_pricing_info').labels;
    assert.deepEqual([info.currency, info.source, info.date], ['USD', 'pricing.json', OWN_DAY]);
    /* The unpriced model has tokens and requests, and no money series at all (not 0). */
    assert.ok(sum(m, 'promptcache_upstream_tokens_total', (l) => l.model === 'mystery-model-1') > 0);
    for (const name of ['promptcache_saved_cost_total', 'promptcache_upstream_cost_total'])
        assert.ok(!m.some((x) => x.name === name && x.labels.model === 'mystery-model-1'), name);
    /* Bounded labels: models by name (metrics-models 10); a tenant label only on the tenant_*
     * families, and without tenant-names every tenant is "other". */
    assert.ok(m.every((s) => !('tenant' in s.labels) || s.name.startsWith('promptcache_tenant_')));
    assert.ok(m.filter((s) => 'tenant' in s.labels).every((s) => s.labels.tenant === 'other'));
    assert.equal(toNano(sum(m, 'promptcache_tenant_saved_cost_total')), want.saved);
    assert.ok(m.some((s) => s.labels.model === 'mystery-model-1'));
});

h.test('report: money by match kind, latency saved, cost per 1,000 requests; both formats agree', async () => {
    const jsonOf = async (args) => {
        const out = await h.waitFor(async () => {
            const r = await report(args);
            assert.equal(r.code, 0, r.output);
            const j = JSON.parse(r.stdout);
            return j.total.requests >= want.requests ? j : null;
        }, {timeout: 15000, what: 'the report to show every request'});
        return out;
    };
    const own = await jsonOf(['--pricing', OWN]);
    const t = own.total;
    assert.equal(t.requests, want.requests);
    assert.equal(t.hits, want.hits);
    assert.equal(toNano(t.money_saved), want.saved);
    assert.equal(toNano(t.money_saved_exact), want.saved);
    assert.equal(toNano(t.money_saved_semantic), 0);
    assert.equal(toNano(t.upstream_cost), want.upstream);
    assert.equal(toNano(t.provider_cache_saved), want.cacheSaved);
    assert.equal(toNano(t.provider_cache_write_premium), want.premium);
    assert.equal(t.money_partial, true, 'an unpriced model: the total is partial');
    assert.equal(own.models.find((x) => x.model === 'mystery-model-1').money_saved, null);
    assert.deepEqual(own.pricing, {source: 'pricing.json', date: OWN_DAY, format: 'promptcache', models: 2});
    assert.ok(Math.abs(t.cost_per_1k_requests - want.upstream * 1e-9 * 1000 / want.requests) < 1e-9);
    assert.ok(Math.abs(t.cost_per_1k_requests_without_cache -
        (want.upstream + want.saved) * 1e-9 * 1000 / want.requests) < 1e-9);
    assert.ok(t.latency_saved_seconds >= 0);
    assert.equal(own.latency_ms.hit.count, want.hits);
    const lite = await jsonOf(['--pricing', LITELLM]);
    assert.equal(lite.pricing.source, 'LiteLLM');
    for (const k of ['money_saved', 'upstream_cost', 'provider_cache_saved',
        'provider_cache_write_premium', 'cost_per_1k_requests', 'cost_per_1k_requests_without_cache'])
        assert.equal(lite.total[k], own.total[k], `${k}: LiteLLM's format gives the same figure`);
    const table = await h.runCli(['report', '--redis', env.redis.url, '--pricing', OWN]);
    assert.match(table.stdout, /saved by the cache +0\.00/);
    assert.match(table.stdout, /per 1,000 requests/);
    assert.match(table.stdout, /latency saved/);
    assert.ok(table.stdout.includes(`\nprices: pricing.json of ${OWN_DAY} (USD, 2 models)\n`), table.stdout);
    assert.match(table.stdout, /\n {2}mystery-model-1 .* unpriced\n/, 'the unpriced model says so');
    const none = await report(['--pricing', 'off']);
    assert.equal(JSON.parse(none.stdout).total.money_saved, null);
    assert.equal(JSON.parse(none.stdout).pricing, null);
});

async function dashboardData(proxy, pred) {
    return h.waitFor(async () => {
        const r = await proxy.get('/dashboard/data?hours=2');
        assert.equal(r.status, 200);
        return r.json.read_ms > 0 && pred(r.json) ? r.json : null;
    }, {timeout: 20000, what: 'the dashboard data to show the traffic'});
}

h.test('the dashboard, rendered by headless chromium, shows what /stats counted', async () => {
    const d = await dashboardData(env.proxy, (j) => j.total.requests === want.requests);
    assert.equal(toNano(d.total.money_saved), want.saved);
    assert.equal(d.by_match.exact.hits, want.hits);
    assert.equal(d.latency_ms.hit.count, want.hits);
    assert.deepEqual(d.pricing, {source: 'pricing.json', date: OWN_DAY});
    const fav = await env.proxy.get('/favicon.ico');
    assert.equal(fav.status, 200);
    assert.equal(fav.headers['content-type'], 'image/x-icon');
    const browser = await openBrowser();
    try {
        const page = await browser.page(`${env.proxy.url}/dashboard`);
        await page.waitFor('document.body.dataset.ready === "1"');
        const shown = await h.waitFor(async () => {
            const v = await page.evaluate(`(() => {
                const val = (id) => document.getElementById(id).dataset.value;
                return {saved: val('saved'), requests: val('requests'), hitRate: val('hit-rate'),
                    savedText: document.getElementById('saved').textContent,
                    source: document.getElementById('price-source').textContent,
                    mystery: [...document.querySelectorAll('#models tbody tr')]
                        .map((tr) => [...tr.cells].map((c) => c.textContent))
                        .find((c) => c[0] === 'mystery-model-1'),
                    hitsLine: document.getElementById('hits-line').textContent,
                    one: [count(1, 'error', 'errors'), count(2, 'error', 'errors')],
                    upstreams: document.querySelectorAll('#upstreams tbody tr').length,
                    html: document.documentElement.outerHTML};
            })()`);
            return Number(v.requests) === want.requests ? v : null;
        }, {timeout: 20000, what: 'the page to show every request'});
        const s = await env.proxy.stats();
        assert.equal(toNano(Number(shown.saved)), toNano(s.saved_cost), 'money saved as in /stats');
        assert.equal(Number(shown.requests), s.api_requests.hit + s.api_requests.miss);
        assert.ok(Math.abs(Number(shown.hitRate) - s.hit_rate) < 1e-4, 'hit rate as in /stats');
        assert.equal(shown.savedText, `$${s.saved_cost.toFixed(6)}`);
        assert.equal(shown.upstreams, 1, 'upstream health: one replica');
        assert.equal(shown.source, `pricing.json of ${OWN_DAY}`);
        assert.deepEqual(shown.mystery.slice(3), ['unpriced', 'unpriced', 'unpriced'],
            'the unpriced model\'s money is unpriced, not $0');
        assert.deepEqual(shown.one, ['1 error', '2 errors']);
        assert.match(shown.hitsLine, /^[\d,]+ hits?, [\d,]+ miss(es)?, [\d,]+ bypassed, [\d,]+ errors?$/);
        assert.doesNotMatch(shown.hitsLine, /\b1 (hits|misses|errors)\b/);
        for (const text of want.texts)
            assert.ok(!shown.html.includes(text), 'no prompt text on the page');
    } finally {
        await browser.close();
    }
});

h.test('figures survive a restart and add up across two instances (one with LiteLLM prices)', async () => {
    await env.proxy.stop();
    const a = await env.startProxy({args: ['--pricing', OWN]});
    const after = await dashboardData(a, () => true);
    assert.equal(after.total.requests, want.requests, 'the restarted proxy reads the same hours');
    assert.equal(toNano(after.total.money_saved), want.saved);
    assert.equal(toNano((await a.stats()).saved_cost), 0, 'its own counters start again');
    const b = await env.startProxy({args: ['--pricing', LITELLM]});
    assert.equal((await b.stats()).pricing.format, 'litellm');
    const wa = await workload(a, 'two-a');
    const wb = await workload(b, 'two-b');
    assert.equal(toNano((await b.stats()).saved_cost), wb.saved, "LiteLLM's prices, same figures");
    assert.equal(toNano((await b.stats()).upstream_cost), wb.upstream);
    const total = want.saved + wa.saved + wb.saved;
    const requests = want.requests + wa.requests + wb.requests;
    for (const p of [a, b]) {
        const d = await dashboardData(p, (j) => j.total.requests === requests);
        assert.equal(toNano(d.total.money_saved), total, 'every instance, summed');
    }
    const r = JSON.parse((await report(['--pricing', OWN])).stdout);
    assert.equal(r.total.requests, requests);
    assert.equal(toNano(r.total.money_saved), total);
});

h.test('the model label goes to the busiest models in Redis first, then first come; the rest is other', async () => {
    const p = await env.startProxy({args: ['--metrics-models', '1']});
    await dashboardData(p, () => true); /* the first read (which hands over the busiest) is done */
    await p.post(MESSAGES, h.messagesBody(h.uniq('label other')));
    await p.post(CHAT, h.chatBody(h.uniq('label busiest')));
    await settle(p, 2);
    const text = (await p.get('/metrics')).text;
    const m = samples(text);
    const models = new Set(m.filter((x) => x.name === 'promptcache_api_requests_total')
        .map((x) => x.labels.model));
    assert.deepEqual([...models].sort(), ['gpt-4o-mini', 'other'],
        `gpt-4o-mini, the busiest of the last hours, kept its label; claude is other\n${
            text.split('\n').filter((l) => /model=/.test(l)).join('\n')}`);
    await p.stop();
});

h.test('metrics-token guards /metrics, /stats and /dashboard (bearer or basic), not health', async () => {
    const p = guarded = await env.startProxy({args: ['--metrics-token', 'metrics-secret-1']});
    for (const path of ['/metrics', '/stats', '/dashboard', '/dashboard/data']) {
        const r = await p.get(path);
        assert.equal(r.status, 401, path);
    }
    assert.match(String((await p.get('/dashboard')).headers['www-authenticate']), /Basic/);
    assert.equal((await p.get('/metrics', {authorization: 'Bearer metrics-secret-1'})).status, 200);
    assert.equal((await p.get('/metrics', {authorization: 'Bearer wrong'})).status, 401);
    const basic = 'Basic ' + Buffer.from('anyone:metrics-secret-1').toString('base64');
    assert.equal((await p.get('/dashboard', {authorization: basic})).status, 200);
    assert.equal((await p.get('/healthz')).status, 200);
    const calls = env.mock.calls.total;
    assert.equal((await p.get('/favicon.ico')).status, 200);
    assert.equal(env.mock.calls.total, calls, 'the favicon never goes upstream');
});

h.test('semantic hits: money saved by meaning; the embedder calls are priced and subtracted', async () => {
    const sem = await createSemanticMock().listen();
    const list = path.join(dir, 'semantic-prices.json');
    fs.writeFileSync(list, JSON.stringify({models: {
        'gpt-4o-mini': {input: 0.15, cache_read: 0.075, output: 0.6}, 'mock-embed': {input: 20}}}));
    try {
        const p = await env.startProxy({args: ['--pricing', list, '--semantic', 'yes', '--semantic-max-error', 'off',
            '--embedder', 'openai', '--embedder-url', sem.url, '--embedder-model', 'mock-embed',
            '--semantic-threshold', '0.9']});
        const t = h.uniq('sem').split(' ')[1];
        const u = {prompt: 1000, read: 0, write: 0, output: 100};
        const first = await p.post(CHAT, h.chatBody(`How do I reverse a list in Python ${t}?`),
            usageHeaders(u));
        assert.equal(first.headers['x-cache-status'], 'MISS');
        assert.equal((await p.stats()).cache_stores, 1, 'stored before the answer was sent');
        /* Asked (no-store: a miss stores nothing) until it hits by meaning: the first answer's
         * vector goes into the index after that answer was sent, and this proxy has just started
         * (its partition may not be loaded yet). Exactly one hit, whatever the misses before. */
        let asked = 1;
        await h.eventually(async () => {
            asked++;
            const second = await p.post(CHAT, h.chatBody(`in python ${t}, how do i REVERSE a list`),
                {'cache-control': 'no-store'});
            assert.equal(second.headers['x-cache-match'], 'semantic', second.headers['x-cache-status']);
        });
        await settle(p, asked);
        const s = await p.stats();
        const cost = nano('gpt-4o-mini', u);
        assert.equal(toNano(s.saved_cost_semantic), cost, 'saved by meaning');
        assert.equal(toNano(s.saved_cost_exact), 0);
        assert.ok(s.semantic_embed_tokens > 0, 'the embedder reported tokens');
        assert.equal(s.own_calls_tokens.input, s.semantic_embed_tokens);
        assert.equal(toNano(s.own_calls_cost.embedder), Math.round(s.semantic_embed_tokens * 20 * 1000));
        assert.equal(toNano(s.net_saved_cost), cost - toNano(s.own_calls_cost.embedder));
        const r = await h.waitFor(async () => {
            const j = JSON.parse((await report(['--pricing', list])).stdout);
            return toNano(j.total.money_saved_semantic) === cost &&
                toNano(j.total.own_calls_cost) === toNano(s.own_calls_cost.embedder) ? j : null;
        }, {timeout: 15000, what: 'the report to show the semantic hit and the embedder'});
        assert.equal(toNano(r.total.own_calls_cost), toNano(s.own_calls_cost.embedder));
        assert.equal(r.total.semantic_hits, 1);
        await p.stop();
    } finally {
        await sem.close();
    }
});

h.test('SIGHUP reads the price list again; a broken edit keeps the running prices', async () => {
    const list = path.join(dir, 'reloaded-prices.json');
    const write = (input) => fs.writeFileSync(list, JSON.stringify({models: {'gpt-4o-mini': {input, output: 0}}}));
    write(1);
    const p = await env.startProxy({args: ['--pricing', list]});
    const u = {prompt: 1000, read: 0, write: 0, output: 0};
    const hitOnce = async (text) => {
        const before = (await p.stats()).saved_cost;
        await missThenHits(p, CHAT, h.chatBody(h.uniq(text)), u, 1);
        return toNano((await p.stats()).saved_cost - before);
    };
    assert.equal(await hitOnce('price one'), 1000 * 1000);
    write(2);
    p.proc.signalIt('SIGHUP');
    await h.waitFor(() => /reload: applied prices/.test(p.proc.output) &&
        /every worker runs the new configuration/.test(p.proc.output), {what: 'the reload'});
    assert.equal(await hitOnce('price two'), 2000 * 1000, 'the new price');
    fs.writeFileSync(list, JSON.stringify({models: {'gpt-4o-mini': {input: -2}}}));
    p.proc.signalIt('SIGHUP');
    await h.waitFor(() => /reload refused/.test(p.proc.output), {what: 'the refused reload'});
    assert.match(p.proc.output, /reloaded-prices\.json: model "gpt-4o-mini"/);
    assert.equal(await hitOnce('price three'), 2000 * 1000,
        `the running prices are kept:\n${p.accessLogText()}\n${JSON.stringify(await p.stats())}`);
    await p.stop();
});

h.test('the access log names the replica of a failed call', async () => {
    const dead = await h.freePort();
    const p = await env.startProxy({upstream: `http://127.0.0.1:${dead}`});
    const r = await p.post(CHAT, h.chatBody(h.uniq('dead upstream')));
    assert.equal(r.status, 502);
    const line = await p.waitAccessLog((l) => l.status === 502);
    assert.equal(line.upstream, `127.0.0.1:${dead}`);
    await p.stop();
});

h.test('the Grafana dashboard in conf/ uses only metrics the proxy exports', async () => {
    const dash = JSON.parse(fs.readFileSync(path.join(h.REPO, 'conf', 'grafana-dashboard.json'), 'utf8'));
    const text = (await guarded.get('/metrics', {authorization: 'Bearer metrics-secret-1'})).text;
    const families = new Set([...text.matchAll(/^# TYPE (\w+) /gm)].map((m) => m[1]));
    const used = new Set();
    for (const p of dash.panels)
        for (const t of p.targets)
            for (const m of t.expr.matchAll(/promptcache_\w+/g))
                used.add(m[0].replace(/_(bucket|sum|count)$/, ''));
    assert.ok(used.size >= 10, 'the dashboard queries the proxy');
    for (const name of used)
        assert.ok(families.has(name), `${name} is exported`);
});

h.test('with no price list, money is unpriced: null in /stats, absent from /metrics, on the page', async () => {
    const p = await env.startProxy({args: ['--pricing', 'off']});
    const u = {prompt: 100, read: 0, write: 0, output: 10};
    await missThenHits(p, CHAT, h.chatBody(h.uniq('no prices')), u, 1);
    const s = await p.stats();
    assert.equal(s.tokens_saved_prompt, 100, 'tokens are counted');
    for (const k of ['saved_cost', 'upstream_cost', 'net_saved_cost', 'saved_cost_exact'])
        assert.equal(s[k], null, `${k} is unpriced, not 0`);
    assert.equal(s.own_calls_cost.embedder, null);
    assert.equal(s.currency, null);
    assert.equal(s.pricing, null);
    assert.equal(s.money_partial, false);
    const text = (await p.get('/metrics')).text;
    assert.doesNotMatch(text, /^promptcache_pricing_info/m);
    assert.doesNotMatch(text, /^promptcache_saved_cost_total/m, 'no money series');
    const d = await dashboardData(p, () => true);
    assert.equal(d.pricing, null);
    assert.equal(d.total.money_saved, null);
    await p.stop();
});

h.test('Responses API traffic is counted as endpoint responses, not dropped or chat', async () => {
    const p = await env.startProxy();
    const body = {model: 'gpt-4.1-mini', input: h.uniq('responses counted')};
    const miss = await p.post('/v1/responses', body);
    assert.equal(miss.headers['x-cache-status'], 'MISS', miss.text);
    await h.eventually(async () => assert.equal((await p.stats()).cache_stores, 1));
    h.assertHit(await p.post('/v1/responses', body));
    await settle(p, 2);
    const m = samples((await p.get('/metrics')).text);
    const resp = (l) => l.endpoint === 'responses';
    assert.equal(sum(m, 'promptcache_api_requests_total', (l) => resp(l) && l.cache === 'hit'), 1);
    assert.equal(sum(m, 'promptcache_api_requests_total', (l) => resp(l) && l.cache === 'miss'), 1);
    assert.equal(sum(m, 'promptcache_request_duration_seconds_count', resp),
        sum(m, 'promptcache_api_requests_total', resp));
    assert.ok(m.filter((x) => x.name === 'promptcache_api_requests_total' && x.labels.endpoint === 'chat')
        .every((x) => x.labels.model !== 'gpt-4.1-mini'), 'none of it under chat');
    await p.stop();
});

h.test('one hit rate: /stats, /metrics (the formula of doc/metrics.md), report and dashboard agree', async () => {
    /* A Redis database of its own: the report and the dashboard see this traffic only. */
    const url = env.redis.url.replace(/\/\d+$/, '/7');
    const p = await env.startProxy({redis: url, args: ['--pricing', OWN]});
    await p.waitReady();
    const body = h.chatBody(h.uniq('hit rate'));
    assert.equal((await p.post(CHAT, body)).headers['x-cache-status'], 'MISS');
    await h.eventually(async () => assert.equal((await p.stats()).cache_stores, 1));
    h.assertHit(await p.post(CHAT, body));
    h.assertHit(await p.post(CHAT, body));
    /* A miss the upstream fails: still a miss (the cache was looked up), and an error. */
    const failed = await p.post(CHAT, h.chatBody(h.uniq('failed miss')), {'x-mock-status': '502'});
    assert.equal(failed.status, 502);
    /* A refresh skips the lookup: not in the hit rate. */
    const fresh = await p.post(CHAT, h.chatBody(h.uniq('refresh')), {'cache-control': 'no-cache'});
    assert.equal(fresh.headers['x-cache-status'], 'REFRESH');
    await settle(p, 5);
    const s = await p.stats();
    const hits = s.api_requests.hit, misses = s.api_requests.miss;
    assert.ok(hits === 2 && misses === 2, JSON.stringify(s.api_requests));
    const rate = Number((hits / (hits + misses)).toFixed(4));
    assert.equal(s.hit_rate, rate, '/stats');
    const m = samples((await p.get('/metrics')).text);
    const api = (cache) => sum(m, 'promptcache_api_requests_total', (l) => cache.test(l.cache));
    assert.equal(Number((api(/^hit$/) / api(/^(hit|miss)$/)).toFixed(4)), rate, '/metrics');
    const r = await h.waitFor(async () => {
        const out = await h.runCli(['report', '--redis', url, '--format', 'json', '--hours', '2']);
        const j = JSON.parse(out.stdout);
        return j.total.requests === hits + misses + 1 ? j : null;
    }, {timeout: 15000, what: 'the report to show the five requests'});
    assert.deepEqual([r.total.hits, r.total.misses, r.total.bypasses, r.total.errors], [hits, 2, 1, 1]);
    assert.equal(r.total.hit_rate, rate, 'report');
    const d = await dashboardData(p, (j) => j.total.requests === hits + misses + 1);
    assert.equal(d.total.hit_rate, rate, 'dashboard');
    await p.stop();
});

h.test('the Grafana dashboard: provisioned from a file, the list\'s currency, one unit per axis', () => {
    const dash = JSON.parse(fs.readFileSync(path.join(h.REPO, 'conf', 'grafana-dashboard.json'), 'utf8'));
    const text = JSON.stringify(dash);
    assert.ok(!('__inputs' in dash) && !text.includes('DS_PROMETHEUS'),
        'no import-only ${DS_PROMETHEUS}: file provisioning has no inputs to fill');
    const vars = Object.fromEntries(dash.templating.list.map((v) => [v.name, v]));
    assert.equal(vars.datasource.type, 'datasource');
    assert.equal(vars.datasource.query, 'prometheus');
    assert.match(vars.currency.query.query || vars.currency.query, /promptcache_pricing_info/);
    const uids = [...text.matchAll(/"uid":"([^"]*)"/g)].map((x) => x[1]).filter((u) => u !== 'promptcache');
    assert.ok(uids.length > 10 && uids.every((u) => u === '${datasource}'), [...new Set(uids)].join());
    /* What each query measures, from the metric it reads. */
    const kind = (expr) => /_cost_total/.test(expr) ? 'money' : /_tokens_total/.test(expr) ? 'tokens'
        : /_seconds/.test(expr) && !/_seconds_total/.test(expr) ? 'seconds'
            : /latency_saved_seconds_total/.test(expr) ? 'seconds per second'
                : /replica_up|_live\b|redis_connected/.test(expr) ? 'state' : 'per second';
    for (const p of dash.panels) {
        const kinds = new Set(p.targets.map((t) => kind(t.expr)));
        assert.equal(kinds.size, 1, `${p.title}: one kind per panel (${[...kinds]})`);
        if (kinds.has('money')) {
            assert.ok(p.title.includes('${currency}'), `${p.title}: names the currency`);
            assert.doesNotMatch(p.fieldConfig.defaults.unit || '', /^currency/, `${p.title}: no fixed currency unit`);
        }
    }
    const rate = dash.panels.find((p) => p.title === 'Hit rate').targets[0].expr;
    assert.match(rate, /cache="hit"/);
    assert.match(rate, /cache=~"hit\|miss"/);
});

h.test('-t checks the price list; implausible entries are refused with file and model', async () => {
    const bad = path.join(dir, 'bad.json');
    fs.writeFileSync(bad, JSON.stringify({models: {'cheap-model': {input: 1, cache_read: 2, output: 1}}}));
    const r = await h.runCli(['-t', '--pricing', bad]);
    assert.equal(r.code, 1);
    assert.ok(r.stderr.includes(`${bad}: model "cheap-model": a cache read`), r.stderr);
    fs.writeFileSync(bad, JSON.stringify({models: {m: {input: -1}}}));
    assert.equal((await h.runCli(['-t', '--pricing', bad])).code, 1);
    const ok = await h.runCli(['-t', '--pricing', LITELLM]);
    assert.equal(ok.code, 0, ok.output);
    const shipped = await h.runCli(['-t']);
    assert.equal(shipped.code, 0, shipped.output);
});

h.test('cached tokens beyond the prompt tokens: /stats, the report and the dashboard price them alike', async () => {
    /* A Redis database of its own: the report and the dashboard see this traffic only. */
    const url = env.redis.url.replace(/\/\d+$/, '/8');
    const p = await env.startProxy({redis: url, args: ['--pricing', OWN]});
    await p.waitReady();
    /* An inconsistent usage block: 300 cached of 100 prompt tokens (OpenAI counts them within). */
    const odd = JSON.stringify({id: 'chatcmpl-odd', object: 'chat.completion', created: 1, model: 'gpt-4o-mini',
        choices: [{index: 0, message: {role: 'assistant', content: 'odd usage'}, finish_reason: 'stop'}],
        usage: {prompt_tokens: 100, completion_tokens: 10, total_tokens: 110,
            prompt_tokens_details: {cached_tokens: 300}}});
    const body = h.chatBody(h.uniq('odd usage'));
    const miss = await p.post(CHAT, body, {'x-mock-body': odd});
    assert.equal(miss.headers['x-cache-status'], 'MISS');
    await h.eventually(async () => assert.equal((await p.stats()).cache_stores, 1));
    h.assertHit(await p.post(CHAT, body));
    await settle(p, 2);
    /* The parts never exceed the whole: the 100 prompt tokens are all cache reads. */
    const want = nano('gpt-4o-mini', {prompt: 100, read: 100, write: 0, output: 10});
    const s = await p.stats();
    const r = await h.waitFor(async () => {
        const out = await h.runCli(['report', '--redis', url, '--format', 'json', '--hours', '2',
            '--pricing', OWN]);
        const j = JSON.parse(out.stdout);
        return j.total.requests === 2 ? j : null;
    }, {timeout: 15000, what: 'the report to show the two requests'});
    const d = await dashboardData(p, (j) => j.total.requests === 2);
    assert.deepEqual({
        statsSaved: toNano(s.saved_cost), statsUpstream: toNano(s.upstream_cost),
        statsCached: s.tokens_saved_cached, reportSaved: toNano(r.total.money_saved),
        reportUpstream: toNano(r.total.upstream_cost), reportSavedCached: r.total.saved_cached_tokens,
        reportUpstreamCached: r.total.upstream_cached_tokens, dashboardSaved: toNano(d.total.money_saved),
    }, {
        statsSaved: want, statsUpstream: want, statsCached: 100, reportSaved: want, reportUpstream: want,
        reportSavedCached: 100, reportUpstreamCached: 100, dashboardSaved: want,
    });
    await p.stop();
});
